#!/bin/bash
# 2026-12-05 (thirty-second session): q / k / v placed one after another (weight_stack) and
# multiplied as one GEMM past one row (cb_gemm16_stack). Checks: the new stacked cases and the
# fused matmuls against the CPU (--quick), memcheck of the stacked cases, parity of the families
# that place q / k / v so (dense, LFM2, Nemotron-H, the Qwen hybrids), test_paged / test_batch_argmax
# / test_snapshot on CUDA. Then Qwen3-8B dims 12 layers bf16, one binary, CINFER_CUDA_GEMM_STACK=0 / 1
# alternating: prefill after a cached prefix and fresh, batched decode of 8 / 32 / 64; the chat.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/cb; mkdir -p $BD
( nice -n 5 timeout 150 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 ) &
for o in "stacked" "matmul_n" "gemm16" "norm_matmul" "matmul_swiglu"; do
  timeout 60 $T --quick --only "$o" > "$O/ops-$o.log" 2>&1
  ts "ops '$o' rc $?: $(grep -c '^PASS' "$O/ops-$o.log") pass $(grep -c '^FAIL' "$O/ops-$o.log") fail"; grep "^FAIL" "$O/ops-$o.log" | head -3
done
grep -E "stacked" $O/ops-stacked.log | head -3
timeout 90 $SAN --tool memcheck --error-exitcode 99 --print-limit 5 $T --quick --only stacked > $O/memcheck.log 2>&1; ts "memcheck stacked rc $? $(grep -c '^PASS' $O/memcheck.log) pass"; grep -E "ERROR SUMMARY" $O/memcheck.log
PARITY_ONLY='qwen3|llama|lfm2|nemotron|qwen3_5|qwen3_next' CINFER=$PWD/$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
for t in test_paged test_batch_argmax test_snapshot; do
  CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
done
wait; ts "made $(du -sh $BD/qwen3-8b-12l | cut -f1)"
b() { CINFER_CUDA_GEMM_STACK=$1 timeout 30 $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len $2 --depth $3 --gen 2 --reps 3 2>&1 | grep -E "^prefill" | sed 's/.*= //; s/ tok.s.*//'; }
for s in "124 1372" "216 1280" "1000 0" "124 1372"; do ts "prefill $s tok/s off: $(b 0 $s) | on: $(b 1 $s)"; done
d() { CINFER_CUDA_GEMM_STACK=$1 timeout 60 $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len 256 --gen 32 --batch $2 2>&1 | grep -E "^decode batch" | sed "s/.*= //"; }
for r in 1 2; do for B in 8 32 64; do [ $r = 2 ] && [ $B = 64 ] && continue; ts "batch $B off: $(d 0 $B)"; ts "batch $B on: $(d 1 $B)"; done; done
SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_STEPS="make chat" BENCH_DIR=$BD SERVE_BUDGET=170 CINFER=$C timeout 190 bash bench/serve_cuda.sh > $O/chat.txt 2>&1
ts "chat rc $?"; grep -E "CHAT|FAIL" $O/chat.txt | head -12
ts end
