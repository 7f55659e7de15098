#!/bin/bash
# 2026-12-04 (twenty-first session), third call: the pipelined prefill attention with its keys in
# segments for few query tiles (CINFER_CUDA_FLASH_SPLIT, default on) — checks on every switch
# setting, the prefill bench at depth alternating split / no split / flash2, then the 5-turn chat
# (reuse against --prefix-cache-mb 0) with the new kernels and with flash2 (CINFER_CUDA_FLASH_PIPE=0).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 &
mk=$!
for sw in "1 1" "1 0" "0 1"; do set -- $sw
  CINFER_CUDA_FLASH_PIPE=$1 CINFER_CUDA_FLASH_SPLIT=$2 timeout 150 $T --only "cuda attention" > $O/ops-att-$1$2.log 2>&1; a=$?
  CINFER_CUDA_FLASH_PIPE=$1 CINFER_CUDA_FLASH_SPLIT=$2 timeout 150 $T --only "cuda rope_attend" > $O/ops-rope-$1$2.log 2>&1; b=$?
  ts "ops pipe=$1 split=$2: attention rc=$a $(grep '^# ' $O/ops-att-$1$2.log | tail -1); rope_attend rc=$b $(grep '^# ' $O/ops-rope-$1$2.log | tail -1)"
done
grep -hE "^FAIL|not ok" $O/ops-*.log | head -20
timeout 150 $SAN --tool racecheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda attention" > $O/racecheck.log 2>&1
ts "racecheck attention rc=$? $(grep '^# ' $O/racecheck.log | tail -1) $(grep -m1 'RACECHECK SUMMARY' $O/racecheck.log)"
timeout 120 $SAN --tool memcheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda rope_attend" > $O/memcheck.log 2>&1
ts "memcheck rope_attend rc=$? $(grep '^# ' $O/memcheck.log | tail -1) $(grep -m1 'ERROR SUMMARY' $O/memcheck.log)"
CINFER=$PWD/$C PARITY_ONLY='^(llama_gqa_llama3|qwen3_bf16|qwen3_5|lfm2|nemotron_h|qwen3_moe|qwen3_tied)$' timeout 120 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc=$? $(grep -c PASS $O/parity.log) PASS $(grep -c FAIL $O/parity.log) FAIL"
grep FAIL $O/parity.log | head
wait $mk
ts made
b() { timeout 40 env CINFER_CUDA_FLASH_PIPE=$1 CINFER_CUDA_FLASH_SPLIT=$2 $C bench --model /tmp/q8 --device cuda --prompt-len $3 --depth $4 --gen 2 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-75; }
for rep in 1 2; do
  for pd in "344 0" "344 1920" "216 1280" "1000 0" "344 8192"; do set -- $pd
    for sw in "1 1" "1 0" "0 0"; do ts "p$1 d$2 pipe,split=$sw: $(b $sw $1 $2)"; done
  done
done
ts chat
SERVE_STEPS="make chat" SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb SERVE_BUDGET=200 timeout 210 bash bench/serve_cuda.sh > $O/chat-new.log 2>&1
grep CHAT $O/chat-new.log
CINFER_CUDA_FLASH_PIPE=0 SERVE_STEPS="chat" SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb SERVE_BUDGET=150 timeout 160 bash bench/serve_cuda.sh > $O/chat-flash2.log 2>&1
grep CHAT $O/chat-flash2.log | sed 's/^/flash2 /'
ts end
