#!/bin/bash
# 2026-12-06 (forty-second session), second of two calls back to back (after 2026-12-06zp-check.sh,
# whose /tmp it reads): the measuring build (prof.cuh, .gpuold/newprof.so.xz) of the same tree, one
# decode step's qt launches and the gaps between them (where the unmarked kernels ran), Qwen3-30B-A3B
# dims 2 layers mlx4, the routing in the gate+up launch and (CINFER_CUDA_ROUTE_FUSE=0) its own.
cd "$(dirname "$0")/../.."
export CINFER_CUDA_UNVERIFIED=1 LD_LIBRARY_PATH=/tmp/newgpu/lib:/usr/local/cuda/lib64
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
ls /tmp/newgpu/cinfer /tmp/q2pair/mlx4/config.json || exit 3
rm -rf /tmp/pgpu && mkdir -p /tmp/pgpu && cp /tmp/newgpu/cinfer /tmp/pgpu/ && xz -dc .gpuold/newprof.so.xz > /tmp/pgpu/libcinfer_cuda.so
for v in 1 0; do
  CINFER_CUDA_ROUTE_FUSE=$v CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout 60 /tmp/pgpu/cinfer bench --model /tmp/q2pair/mlx4 --device cuda --prompt-len 512 --gen 16 > /tmp/p.log 2>&1
  echo "== route=$v: $(grep -E '^decode' /tmp/p.log | sed 's/  */ /g' | cut -c1-70)"
  python3 bench/prof_phases.py /tmp/p.prof --step 6 | cut -c1-230
done
for v in 1 0; do echo "plain lib route=$v: $(CINFER_CUDA_ROUTE_FUSE=$v timeout 60 /tmp/newgpu/cinfer bench --model /tmp/q2pair/mlx4 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-70)"; done
ts end
