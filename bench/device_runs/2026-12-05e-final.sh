#!/bin/bash
# 2026-12-05 (thirtieth session), second call: the whole GPU suite on the session's final code
# (DeepSeek V4's entries on the block pool, the experts' down kernel with 2 warps a row by
# default), the old 4-warp form's moe_experts ops (CINFER_CUDA_DS_SPLIT=4), then decode A/B of
# the two forms, alternating, 3 rounds: Qwen3-30B-A3B dims 4 layers bf16, DeepSeek-V2-Lite dims +
# q_lora 1024 6 layers (make-random --seed 1 on the device while the suite runs).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/bm; mkdir -p $BD
( sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
  nice -n 15 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out $BD/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1
  nice -n 15 timeout 200 $C make-random --config $BD/ds.json --out $BD/ds6 --dtype bf16 --seed 1 --layers 6 >> $O/make.log 2>&1 ) &
OUT=$O/suite timeout 420 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -18 $O/suite.txt
CINFER_CUDA_DS_SPLIT=4 timeout 60 $T --only "moe_experts" > $O/ops_moe_split4.log 2>&1
ts "moe_experts DS_SPLIT=4 rc $? $(grep -c ^PASS $O/ops_moe_split4.log) pass $(grep -c ^FAIL $O/ops_moe_split4.log) fail"
wait; ts "made $(du -sh $BD/q30 $BD/ds6 2>&1 | tr '\n' ' ')"
b() { timeout 60 env CINFER_CUDA_DS_SPLIT=$1 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | head -1 | sed 's/  */ /g' | cut -c1-60; }
for r in 1 2 3; do
  for m in q30 ds6; do
    for f in 2 4; do ts "$m DS_SPLIT=$f r$r: $(b $f $BD/$m)"; done
  done
done
grep -h "^FAIL" $O/suite/logs/*.log | head -10
tar czf $O/suite-logs.tgz -C $O suite 2>/dev/null; rm -rf $O/suite
ts end
