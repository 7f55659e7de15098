#!/bin/bash
# 2026-12-03 (eighteenth session), third call: V4-Flash dims 4 layers fp8-fp4 on the session's code:
# decode at depth 1024 and 65536 (#18: within 15%), then the per-step kernel table
# (bench/ncu_steps.py over ncu summaries of --gen 1 and --gen 5) for the next session's ranking.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1; ts "made rc $?"
for d in 1024 65536 1024; do
  ts "v4 d$d: $(timeout 150 $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen 64 --depth $d 2>&1 | grep -E "^decode |^depth|^prefill" | sed 's/  */ /g' | cut -c1-90 | tr '\n' ' ')"
done
for g in 1 5; do
  timeout 120 $NCU --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen $g > $O/ncu-v4-g$g.txt 2>&1
  ts "ncu g$g rc $?"
done
python3 bench/ncu_steps.py $O/ncu-v4-g1.txt $O/ncu-v4-g5.txt > $O/steps.txt 2>&1; head -40 $O/steps.txt
ts end
