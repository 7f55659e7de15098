#!/bin/bash
# 2026-12-06 (fortieth session), fifth call: prof.cuh's marks split finer (qt_stage's norm pass,
# pairs, group sums; the experts' ids + table reads apart from their first loads), the lib of
# `make gpu-stage-prof` carried as the staged one. Qwen3-30B-A3B dims mlx4 2 layers, DeepSeek-V2-Lite
# dims fp8 3 layers (make-random --seed 1), two runs each.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 2 > $O/make.log 2>&1
MAKE_Q4_JOBS=8 timeout 100 python3 bench/make_q4_pair.py /tmp/q30 2 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
timeout 100 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 3 > $O/makeds.log 2>&1
ts made
for m in /tmp/q30pair/mlx4 /tmp/ds8; do
  for r in 1 2; do
    CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout 60 $C bench --model $m --device cuda --prompt-len 512 --gen 16 > /tmp/p.log 2>&1
    echo "== $m r$r: $(grep -E '^decode' /tmp/p.log | sed 's/  */ /g' | cut -c1-70)"
    python3 bench/prof_phases.py /tmp/p.prof --step 6 | sed -n '4,12p' | grep "^qt"
  done
done
ts end
