#!/bin/bash
# 2026-12-05 (thirty-second session): a group's 16-bit GEMMs of one input (q / k / v, gate / up)
# side by side on side streams (cuda_be.gemm_streams). Checks: the grouped ops against the device's
# unfused ops and the CPU (--quick), the same with the switch off, the dense fixtures' parity,
# test_paged / test_batch_argmax on CUDA (graph-recorded batch steps with the fork / join inside).
# Then Qwen3-8B dims 12 layers bf16, one binary, CINFER_CUDA_GEMM_STREAMS=0 / 1 alternating:
# prefill after a cached prefix and fresh, batched decode of 8 / 32 / 64 sequences; then
# serve_cuda.sh's 5-turn chat (reuse against no reuse, the switch at its default).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/cb; mkdir -p $BD
( nice -n 5 timeout 150 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 ) &
for o in "gemm16" "norm_matmul" "matmul_swiglu" "matmul_n"; do
  for sw in 1 0; do
    CINFER_CUDA_GEMM_STREAMS=$sw timeout 60 $T --quick --only "$o" > "$O/ops-${o}-$sw.log" 2>&1
    ts "ops '$o' streams=$sw rc $?: $(grep -c '^PASS' "$O/ops-${o}-$sw.log") pass $(grep -c '^FAIL' "$O/ops-${o}-$sw.log") fail"
    grep "^FAIL" "$O/ops-${o}-$sw.log" | head -3
  done
done
PARITY_ONLY='qwen3|llama' CINFER=$PWD/$C timeout 90 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
for t in test_paged test_batch_argmax; do
  CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
done
wait; ts "made $(du -sh $BD/qwen3-8b-12l | cut -f1)"
b() { CINFER_CUDA_GEMM_STREAMS=$1 timeout 30 $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len $2 --depth $3 --gen 2 --reps 3 2>&1 | grep -E "^prefill" | sed 's/  */ /g' | cut -c14-60; }
for s in "124 1372" "216 1280" "124 0" "1000 0" "4096 0" "124 1372" "216 1280"; do ts "$s off: $(b 0 $s) | on: $(b 1 $s)"; done
d() { CINFER_CUDA_GEMM_STREAMS=$1 timeout 60 $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len 256 --gen 32 --batch $2 2>&1 | grep -E "^decode batch" | sed "s/.*= //"; }
for r in 1 2; do for B in 8 32 64; do ts "batch $B off: $(d 0 $B)"; ts "batch $B on: $(d 1 $B)"; done; done
SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_STEPS="make chat" BENCH_DIR=$BD SERVE_BUDGET=170 CINFER=$C timeout 190 bash bench/serve_cuda.sh > $O/chat.txt 2>&1
ts "chat rc $?"; grep -E "CHAT|FAIL" $O/chat.txt | head -12
ts end
