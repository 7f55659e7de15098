#!/bin/bash
# 2026-12-06 (forty-first session), second of two calls back to back (after 2026-12-06zj-vec-new.sh, whose
# /tmp it reads): the lib of f3405d8 (.gpuold/old.so.xz) and the new code's measuring build
# (.gpuold/newprof.so.xz): logits --step of the 15 quantized fixtures old vs new (cmp), decode after 512
# alternating new / old, two rounds; then the new measuring build's phases on the 2-layer mlx4 twin.
cd "$(dirname "$0")/../.."
export CINFER_CUDA_UNVERIFIED=1 LD_LIBRARY_PATH=/tmp/newgpu/lib:/usr/local/cuda/lib64
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
ls /tmp/newgpu/cinfer /tmp/q30pair/mlx4/config.json /tmp/ds8/config.json || exit 3
rm -rf /tmp/oldgpu /tmp/profgpu && mkdir -p /tmp/oldgpu /tmp/profgpu && cp /tmp/newgpu/cinfer /tmp/oldgpu/ && cp /tmp/newgpu/cinfer /tmp/profgpu/
xz -dc .gpuold/old.so.xz > /tmp/oldgpu/libcinfer_cuda.so; xz -dc .gpuold/newprof.so.xz > /tmp/profgpu/libcinfer_cuda.so
N=/tmp/newgpu/cinfer; OL=/tmp/oldgpu/cinfer
same=0; diff=0
for f in deepseek_v3_fp8 deepseek_v4_fp8 mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_lfm2_4bit mlx_lfm2_moe_6bit mlx_llama_4bit mlx_llama_mxfp4 mlx_nemotron_h_4bit mlx_qwen3_5_8bit_tied mlx_qwen3_5_moe_4bit mlx_qwen3_8bit_tied mlx_qwen3_mixed mlx_qwen3_moe_4bit mlx_qwen3_next_4bit; do
  timeout 60 $OL logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/lold_$f.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f failed: $(tail -2 /tmp/l.log)"
  if cmp -s /tmp/lold_$f.f32 /tmp/lnew_$f.f32; then same=$((same+1)); else diff=$((diff+1)); echo "step $f: DIFFER"; fi
done
echo "logits --step old vs new: $same same, $diff differ"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed 's/  */ /g' | cut -c1-75; }
for r in 1 2; do
  for v in new old; do
    B=$N; [ $v = old ] && B=$OL
    ts "r$r mlx4 $v: $(b $B bench --model /tmp/q30pair/mlx4)"
    ts "r$r ds8  $v: $(b $B bench --model /tmp/ds8)"
  done
done
CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout 60 /tmp/profgpu/cinfer bench --model /tmp/q30spair/mlx4 --device cuda --prompt-len 512 --gen 16 > /tmp/p.log 2>&1
echo "== newprof mlx4 2L: $(grep -E '^decode' /tmp/p.log | sed 's/  */ /g' | cut -c1-70)"
python3 bench/prof_phases.py /tmp/p.prof --step 6 > /tmp/pp.txt 2>&1; head -12 /tmp/pp.txt
ts end
