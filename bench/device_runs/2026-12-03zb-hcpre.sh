#!/bin/bash
# 2026-12-03 (eighteenth session), fourth call: hc_pre over several blocks a row (hc_mix_pre's
# path: each block a share of the channels, the first also post / comb): op tests and memcheck of
# the hc ops, the deepseek_v4 fixtures' parity, V4-Flash dims 4 layers decode after 512 against the
# lib of the commit before (.gpuz/before.so.xz), alternating, 2 rounds.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
mkdir -p /tmp/bef && cp .gpu/cinfer /tmp/bef/ && xz -dc .gpuz/before.so.xz > /tmp/bef/libcinfer_cuda.so
CB=/tmp/bef/cinfer
ts start
( timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
for o in "cuda hc_" "v4"; do timeout 100 $T --only "$o" >> $O/ops.log 2>&1; done
ts "ops: $(grep -c '^PASS' $O/ops.log) pass $(grep -c '^FAIL' $O/ops.log) fail"; grep '^FAIL' $O/ops.log | head -5
timeout 100 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda hc_" > $O/mc.log 2>&1; ts "memcheck hc rc $? $(tail -1 $O/mc.log)"
PARITY_ONLY='deepseek_v4' CINFER=$PWD/$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
wait; ts "made rc: $(tail -1 $O/make.log | cut -c1-80)"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 64 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
for r in 1 2; do
  ts "v4 r$r before: $(b $CB bench --model /tmp/v4)"
  ts "v4 r$r after:  $(b $C bench --model /tmp/v4)"
done
ts end
