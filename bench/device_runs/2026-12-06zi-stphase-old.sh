#!/bin/bash
# 2026-12-06 (forty-first session), second of two calls back to back (after 2026-12-06zh-stphase-new.sh,
# whose /tmp it reads): the measuring build of f3405d8 (.gpuold/oldprof.so.xz) beside the new one, one
# decode step's phases each, alternating, mlx4 then fp8.
cd "$(dirname "$0")/../.."
export CINFER_CUDA_UNVERIFIED=1 LD_LIBRARY_PATH=/tmp/newgpu/lib:/usr/local/cuda/lib64
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
ls /tmp/newgpu/cinfer /tmp/q30pair/mlx4/config.json /tmp/ds8/config.json || exit 3
rm -rf /tmp/oldgpu && mkdir -p /tmp/oldgpu && cp /tmp/newgpu/cinfer /tmp/oldgpu/ && xz -dc .gpuold/oldprof.so.xz > /tmp/oldgpu/libcinfer_cuda.so
for m in /tmp/q30pair/mlx4 /tmp/ds8; do
  for v in old new; do
    B=/tmp/newgpu/cinfer; [ $v = old ] && B=/tmp/oldgpu/cinfer
    CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout 60 $B bench --model $m --device cuda --prompt-len 512 --gen 16 > /tmp/p.log 2>&1
    echo "== $v $m: $(grep -E '^decode' /tmp/p.log | sed 's/  */ /g' | cut -c1-70)"
    python3 bench/prof_phases.py /tmp/p.prof --step 6 | head -16
  done
done
ts end
