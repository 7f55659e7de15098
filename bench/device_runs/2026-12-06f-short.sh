#!/bin/bash
# 2026-12-06 (thirty-seventh session): 2026-12-06e cut to what ~5 minutes of device time hold (the
# rest of the budget went to refused starts): the f16 prefill attention's default rule (from 512
# rows) against it off at 512 / 1000 / 2048 fresh rows, one round; then the chat's turn-5 time to
# first token split with the queue / admission counters (2026-12-06e-ttft.sh).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
SERVE_STEPS=make SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb CINFER=$C timeout 120 bash bench/serve_cuda.sh > $O/make.log 2>&1
ts "made: $(du -sh /tmp/sb/q8 2>&1 | cut -f1)"
M=/tmp/sb/q8
for shape in "--prompt-len 512 --depth 0" "--prompt-len 1000 --depth 0" "--prompt-len 2048 --depth 0"; do
  for e in X=default CINFER_CUDA_FLASH_H16=0; do
    env $e $C bench --model $M --device cuda $shape --gen 1 --reps 5 2>&1 | grep -E "^reps" | sed "s/^/$e $shape: /"
  done
done
ts "bench done"
MODEL=$M timeout 100 bash bench/device_runs/2026-12-06e-ttft.sh
ts end
