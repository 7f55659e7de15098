#!/bin/bash
# 2026-12-04 (twenty-first session), second call: the pipelined prefill attention (attn_flash.cu,
# CINFER_CUDA_FLASH_PIPE, default on) checked and measured against attn_flash2_kernel (=0) in one
# binary. Checks: the attention / rope_attend ops (both settings), racecheck and memcheck of the
# attention ops, a parity subset. Bench: Qwen3-8B dims 12 layers bf16 prefill of 344 tokens at
# depth 0 and 1920 (call g: flash2 730 us a layer at 1920 under ncu), 1000 and 4096 fresh,
# alternating the switch.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 &
mk=$!
for sw in 1 0; do
  CINFER_CUDA_FLASH_PIPE=$sw timeout 150 $T --only "cuda attention" > $O/ops-att-$sw.log 2>&1; a=$?
  CINFER_CUDA_FLASH_PIPE=$sw timeout 150 $T --only "cuda rope_attend" > $O/ops-rope-$sw.log 2>&1; b=$?
  ts "ops pipe=$sw: attention rc=$a $(grep '^# ' $O/ops-att-$sw.log | tail -1); rope_attend rc=$b $(grep '^# ' $O/ops-rope-$sw.log | tail -1)"
done
grep -E "FAIL|not ok" $O/ops-*.log | head -20
timeout 120 $SAN --tool racecheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda rope_attend" > $O/racecheck.log 2>&1
ts "racecheck rope_attend rc=$? $(grep '^# ' $O/racecheck.log | tail -1) $(grep -m1 'RACECHECK SUMMARY' $O/racecheck.log)"
timeout 120 $SAN --tool memcheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda attention" > $O/memcheck.log 2>&1
ts "memcheck attention rc=$? $(grep '^# ' $O/memcheck.log | tail -1) $(grep -m1 'ERROR SUMMARY' $O/memcheck.log)"
CINFER=$PWD/$C PARITY_ONLY='^(llama_gqa_llama3|qwen3_bf16|qwen3_5|lfm2|nemotron_h|qwen3_moe|deepseek_v3_long)$' timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc=$? $(grep -c PASS $O/parity.log) PASS $(grep -c FAIL $O/parity.log) FAIL"
grep FAIL $O/parity.log | head
wait $mk
ts made
b() { timeout 40 env CINFER_CUDA_FLASH_PIPE=$1 $C bench --model /tmp/q8 --device cuda --prompt-len $2 --depth $3 --gen 2 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-75; }
for rep in 1 2; do
  for pd in "344 0" "344 1920" "1000 0" "4096 0" "344 8192"; do set -- $pd
    for sw in 1 0; do ts "p$1 d$2 pipe=$sw: $(b $sw $1 $2)"; done
  done
done
ts end
