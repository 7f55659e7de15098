#!/bin/bash
# (bench/RESULTS.md, thirteenth session, 2026-12-03: one device call from the repository root with
# .gpuz carried; the last of the session's device time, so time-boxed.) norm_matmul_keep (the MoE
# block's RMSNorm in the router's launch): every op test, memcheck over the new cases, parity of
# every fixture, then DeepSeek V2-Lite dims q_lora 1024 14 layers fp8 / bf16 decode after 512.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1 CINFER=$PWD/$C
timeout 100 $T > $O/ops.log 2>&1; ts "ops rc $?: $(grep -c '^PASS' $O/ops.log) pass, $(grep -c '^FAIL' $O/ops.log) fail"; grep '^FAIL' $O/ops.log | head -5
timeout 40 $SAN --tool memcheck --error-exitcode 99 $T --quick --only norm_matmul_keep > $O/mc.log 2>&1; ts "memcheck keep rc $?: $(grep -c '^PASS' $O/mc.log) pass"
timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds-q1024.json
for dt in fp8 bf16; do $C make-random --config /tmp/ds-q1024.json --out /tmp/ds-$dt --dtype $dt --seed 1 --layers 14 > /dev/null; done
b() { timeout 30 $C bench --model $1 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-90; }
ts "fp8: $(b /tmp/ds-fp8)"; ts "bf16: $(b /tmp/ds-bf16)"
ts end
