#!/bin/bash
# Fifty-sixth session (2026-12-07): #16's fp8 twin of ds14 (DeepSeek-V2-Lite dims + q_lora 1024,
# 14 layers, E4M3 128x128 block scales) beside bf16: decode after 512, two rounds alternating, then
# the per-step kernel table (ncu, bench/ncu_steps.py) of the fp8 one. Carry [".gpuz"] (make gpu-stage).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
[ -d /tmp/ds14 ] || timeout 240 $C make-random --config /tmp/ds.json --out /tmp/ds14 --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
[ -d /tmp/ds14f ] || timeout 240 $C make-random --config /tmp/ds.json --out /tmp/ds14f --dtype fp8 --seed 1 --layers 14 > $O/make2.log 2>&1
ts made
b() { timeout -k 5 60 $C bench --model $1 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for r in 1 2; do for m in /tmp/ds14f /tmp/ds14; do echo "r$r $(basename $m): $(b $m)"; done; done
ts bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for g in 1 5; do
  timeout 100 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/ds14f --device cuda --prompt-len 512 --gen $g > $O/ncu-ds14f-g$g.txt 2>&1
done
python3 bench/ncu_steps.py $O/ncu-ds14f-g1.txt $O/ncu-ds14f-g5.txt 2>&1 | head -40
xz -9 $O/ncu-*.txt 2>/dev/null
ts end
