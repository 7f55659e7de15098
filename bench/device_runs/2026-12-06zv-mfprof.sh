#!/bin/bash
# 2026-12-06 (forty-sixth session): where moe_fused's time goes, phase by phase (prof.cuh marks in
# moe_fused_kernel, kind 4; the measuring build of the same tree as .gpu's), Qwen3-30B-A3B dims
# 4 of 48 layers bf16, a decode after 512, then the plain library fused and not (CINFER_CUDA_MOE_FUSE=0).
# .gpup/p.tar.xz holds cinfer, its libraries, libcinfer_cuda.so and the measuring libprof.so.
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/run.log") 2>&1
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/p && mkdir -p /tmp/p && tar xJf .gpup/p.tar.xz -C /tmp && head -1 /tmp/p/MANIFEST
mkdir -p /tmp/pp && cp /tmp/p/cinfer /tmp/pp/ && cp /tmp/p/libprof.so /tmp/pp/libcinfer_cuda.so
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64
M=/tmp/a3b4l; timeout 200 /tmp/p/cinfer make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1 || { echo "make-random failed"; tail -3 $O/make.log; }
ts made
CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout 90 /tmp/pp/cinfer bench --model $M --device cuda --prompt-len 512 --gen 32 > $O/prof.log 2>&1
echo "prof build: $(grep -E '^decode' $O/prof.log | sed 's/  */ /g' | cut -c1-80)"
python3 bench/prof_phases.py /tmp/p.prof | cut -c1-400 | head -12
for r in 1 2; do for v in 1 0; do
  echo "plain fuse=$v: $(CINFER_CUDA_MOE_FUSE=$v timeout 60 /tmp/p/cinfer bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-80)"
done; done
ts end
