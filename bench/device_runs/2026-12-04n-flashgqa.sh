#!/bin/bash
# 2026-12-04 (twenty-first session), eighth call: the pipelined prefill attention with a block per
# kv group (every head of it, 64 / G positions each: the K / V tiles serve G heads;
# CINFER_CUDA_FLASH_GQA=1) against a block per head (=0). Call m found the ldmatrix f16 tiles no
# faster than the per-fragment conversion: the tile loads, not the fragment reads, bound it.
# Checks on the settings, racecheck, memcheck, a parity subset, the prefill bench alternating.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 &
mk=$!
for sw in "1 1" "0 1" "1 0"; do set -- $sw
  CINFER_CUDA_FLASH_GQA=$1 CINFER_CUDA_FLASH_LDM=$2 timeout 150 $T --only "cuda attention" > $O/ops-att-$1-$2.log 2>&1; a=$?
  CINFER_CUDA_FLASH_LDM=$1 CINFER_CUDA_FLASH_BK=$2 timeout 150 $T --only "cuda rope_attend" > $O/ops-rope-$1-$2.log 2>&1; b=$?
  ts "ops gqa=$1 ldm=$2: attention rc=$a $(grep '^# ' $O/ops-att-$1-$2.log | tail -1); rope_attend rc=$b $(grep '^# ' $O/ops-rope-$1-$2.log | tail -1)"
done
grep -hE "^FAIL" $O/ops-*.log | head
timeout 150 $SAN --tool racecheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda attention" > $O/racecheck.log 2>&1
ts "racecheck attention rc=$? $(grep '^# ' $O/racecheck.log | tail -1) $(grep -m1 'RACECHECK SUMMARY' $O/racecheck.log)"
timeout 120 $SAN --tool memcheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda rope_attend" > $O/memcheck.log 2>&1
ts "memcheck rope_attend rc=$? $(grep '^# ' $O/memcheck.log | tail -1) $(grep -m1 'ERROR SUMMARY' $O/memcheck.log)"
CINFER=$PWD/$C PARITY_ONLY='^(llama_gqa_llama3|qwen3_bf16|qwen3_5|lfm2|qwen3_tied|qwen3_moe|nemotron_h)$' timeout 100 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc=$? $(grep -c PASS $O/parity.log) PASS $(grep -c FAIL $O/parity.log) FAIL"
wait $mk
ts made
b() { timeout 40 env CINFER_CUDA_FLASH_GQA=$1 $C bench --model /tmp/q8 --device cuda --prompt-len $2 --depth $3 --gen 2 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-75; }
for rep in 1 2; do
  for pd in "344 0" "344 1920" "216 1280" "1000 0" "4096 0" "344 8192"; do set -- $pd
    for sw in 1 0; do ts "p$1 d$2 gqa=$sw: $(b $sw $1 $2)"; done
  done
done
ts end
