#!/bin/bash
# 2026-12-05 (thirtieth session), first call: DeepSeek V4's compressed entries on the block pool
# (issue #19) checked on the device: the v4 ops (index + attention over entries read through
# block tables = from the states), test_paged (every paged family incl. deepseek_v4 /
# deepseek_v4_hub: shared pool = own, block reuse + restored states, copy on write), snapshot,
# batch, the deepseek_v4* parity; the routed experts' down kernel in five (split, rows, batch)
# forms (CINFER_CUDA_DS_FORM 0..4, issue #16): moe_experts ops under each, then decode A/B,
# alternating, Qwen3-30B-A3B dims 4 layers bf16 and DeepSeek-V2-Lite dims + q_lora 1024 6 layers
# (make-random --seed 1 on the device while the checks run).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/bm; mkdir -p $BD
( sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
  nice -n 15 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out $BD/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1
  nice -n 15 timeout 200 $C make-random --config $BD/ds.json --out $BD/ds6 --dtype bf16 --seed 1 --layers 6 >> $O/make.log 2>&1 ) &
timeout 100 $T --only "cuda v4" > $O/ops_v4.log 2>&1; ts "ops v4 rc $? $(grep -c ^PASS $O/ops_v4.log) pass $(grep -c ^FAIL $O/ops_v4.log) fail"
grep -E "^FAIL" $O/ops_v4.log | head -8
for f in 0 1 2 3 4; do
  CINFER_CUDA_DS_FORM=$f timeout 60 $T --only "moe_experts" > $O/ops_moe$f.log 2>&1
  ts "moe_experts DS_FORM=$f rc $? $(grep -c ^PASS $O/ops_moe$f.log) pass $(grep -c ^FAIL $O/ops_moe$f.log) fail"
  grep -E "^FAIL" $O/ops_moe$f.log | head -3
done
for t in test_paged test_snapshot test_batch_argmax; do
  CINFER_TEST_DEVICE=cuda timeout 120 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
  grep -E "^FAIL" $O/$t.log | head -5
done
CINFER=$C PARITY_ONLY='deepseek_v4' timeout 120 bash tests/gpu/parity.sh > $O/parity_v4.log 2>&1; ts "parity v4 rc $? $(grep -c ^PASS $O/parity_v4.log) pass $(grep -c ^FAIL $O/parity_v4.log) fail"
grep -E "^FAIL" $O/parity_v4.log | head -5
wait; ts "made $(du -sh $BD/q30 $BD/ds6 2>&1 | tr '\n' ' ')"
b() { timeout 60 env CINFER_CUDA_DS_FORM=$1 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-60; }
for r in 1 2; do
  for m in q30 ds6; do
    for f in 0 1 2 3 4; do ts "$m DS_FORM=$f r$r: $(b $f $BD/$m)"; done
  done
done
ts end
