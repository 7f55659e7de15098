#!/bin/bash
# 2026-12-06 (forty-first session), second of two calls back to back (after 2026-12-06zl-gsum-new.sh, whose
# /tmp it reads): decode after 512 alternating the new lib / the lib of 51a0390 (.gpuold/prev.so.xz: the
# float4 pairs, group sums a warp a group), two rounds, Qwen3-30B-A3B dims 12 layers mlx4.
cd "$(dirname "$0")/../.."
export CINFER_CUDA_UNVERIFIED=1 LD_LIBRARY_PATH=/tmp/newgpu/lib:/usr/local/cuda/lib64
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
ls /tmp/newgpu/cinfer /tmp/q30pair/mlx4/config.json || exit 3
rm -rf /tmp/oldgpu && mkdir -p /tmp/oldgpu && cp /tmp/newgpu/cinfer /tmp/oldgpu/ && xz -dc .gpuold/prev.so.xz > /tmp/oldgpu/libcinfer_cuda.so
N=/tmp/newgpu/cinfer; OL=/tmp/oldgpu/cinfer
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed 's/  */ /g' | cut -c1-75; }
for r in 1 2 3; do
  for v in new prev; do
    B=$N; [ $v = prev ] && B=$OL
    ts "r$r mlx4 $v: $(b $B bench --model /tmp/q30pair/mlx4)"
  done
done
ts end
