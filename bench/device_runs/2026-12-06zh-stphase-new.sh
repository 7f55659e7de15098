#!/bin/bash
# 2026-12-06 (forty-first session): why the batched qt_stage (2026-12-06zf / zg: mlx4 decode -4%) is slower.
# First of two calls back to back: .gpuz staged with the new code's measuring build (make gpu-stage-prof's
# lib); Qwen3-30B-A3B dims mlx4 2 layers and DeepSeek-V2-Lite dims fp8 3 layers (make-random --seed 1) made
# in /tmp, the staged tree kept in /tmp/newgpu; prof.cuh's phases of one decode step. Next:
# 2026-12-06zi-stphase-old.sh (the measuring build of f3405d8).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
timeout 100 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 2 > $O/make.log 2>&1
MAKE_Q4_JOBS=8 timeout 100 python3 bench/make_q4_pair.py /tmp/q30 2 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
timeout 100 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 3 > $O/makeds.log 2>&1
ts made
for m in /tmp/q30pair/mlx4; do
  CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout 60 $C bench --model $m --device cuda --prompt-len 512 --gen 16 > /tmp/p.log 2>&1
  echo "== new $m: $(grep -E '^decode' /tmp/p.log | sed 's/  */ /g' | cut -c1-70)"
  python3 bench/prof_phases.py /tmp/p.prof --step 6 | head -40
done
ts end
