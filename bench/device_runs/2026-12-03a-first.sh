#!/bin/bash
# (bench/RESULTS.md, twelfth session, 2026-12-03: one device call from the repository root with
# .gpuz carried.) The GPU suite on c880844 (chunked tensor-core launches, batch-invariance test),
# then mlx4 / mlx8 Qwen3-30B-A3B dims (12 layers) decode at batch 1 and 8.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
OUT=$O bash tests/gpu/run.sh 2>&1 | tail -12
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
MAKE_Q_BITS=8 MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
for m in mlx4 mlx8; do for b in 1 8; do
  ts "$m batch $b: $(timeout 60 $C bench --model /tmp/q30pair/$m --device cuda --prompt-len 512 --gen 128 --batch $b 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-80)"
done; done
ts end
