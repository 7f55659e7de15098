#!/bin/bash
# 2026-12-05 (thirtieth session), third call: the routed experts' gate+up kernel with a row's up
# and gate loads issued together (lane_dot2: the same products in the same order, so the same
# bits; CINFER_CUDA_GU_PAIR=0 the old up-then-gate reads): moe_experts ops, then decode A/B,
# alternating, 3 rounds, Qwen3-30B-A3B dims 4 layers bf16 and DeepSeek-V2-Lite dims + q_lora 1024
# 6 layers (make-random --seed 1 on the device while the ops run).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/bm; mkdir -p $BD
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out $BD/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1 &
timeout 150 $C make-random --config $BD/ds.json --out $BD/ds6 --dtype bf16 --seed 1 --layers 6 >> $O/make.log 2>&1 &
timeout 70 $T --only "moe_experts" > $O/ops_moe.log 2>&1
ts "moe_experts rc $? $(grep -c ^PASS $O/ops_moe.log) pass $(grep -c ^FAIL $O/ops_moe.log) fail"; grep ^FAIL $O/ops_moe.log | head -3
wait; ts "made $(du -sh $BD/q30 $BD/ds6 2>&1 | tr '\n' ' ')"
b() { timeout 40 env CINFER_CUDA_GU_PAIR=$1 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | head -1 | sed 's/  */ /g' | cut -c1-60; }
for r in 1 2 3; do
  for m in q30 ds6; do
    for f in 1 0; do ts "$m GU_PAIR=$f r$r: $(b $f $BD/$m)"; done
  done
done
ts end
