#!/bin/bash
# 2026-12-04 (twenty-first session), first call: which kernels of a 344-token prefill grow with the
# cached depth (1920)? ncu kernel durations of `cinfer bench --no-graphs` at depth 0 and 1920,
# Qwen3-8B dims 12 layers bf16 (the chat of 2026-12-04e's turn 5), plus the plain timings.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts made
for d in 0 1920 0 1920; do
  ts "p344 d$d: $(timeout 30 $C bench --model /tmp/q8 --device cuda --prompt-len 344 --depth $d --gen 2 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-70)"
  ts "p344 d$d nograph: $(timeout 30 $C bench --model /tmp/q8 --device cuda --prompt-len 344 --depth $d --gen 2 --no-graphs 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-70)"
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for d in 0 1920; do
  timeout 240 $NCU --csv --metrics gpu__time_duration.sum $C bench --model /tmp/q8 --device cuda --prompt-len 344 --depth $d --gen 1 --no-graphs > $O/ncu_d$d.csv 2> $O/ncu_d$d.err
  ts "ncu d$d rc=$? lines $(wc -l < $O/ncu_d$d.csv)"
done
ts end
