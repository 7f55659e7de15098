#!/bin/bash
# 2026-12-05 (thirty-first session): 2026-12-05j-pfsmall.sh cut to what ~5 minutes of device time
# hold (three machine starts had failed): the changed ops against the CPU and against the device's
# unfused ops (--quick), the dense fixtures' parity, test_paged on CUDA, Qwen3-8B dims 12 layers
# bf16 prefill before (7a1cb09, .gpuz/before.tar.xz) / after, then serve_cuda.sh's 5-turn chat.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
mkdir -p /tmp/bef && tar xJf .gpuz/before.tar.xz -C /tmp/bef
B=/tmp/bef/cinfer
ts start
BD=/tmp/cb; mkdir -p $BD
( nice -n 5 timeout 120 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 ) &
for o in "cuda rmsnorm" "cuda attention" "cuda rope_attend" "gemm16" "norm_matmul" "matmul_swiglu" "cuda swiglu" "matmul_n"; do
  timeout 60 $T --quick --only "$o" > "$O/ops-${o// /_}.log" 2>&1; ts "ops '$o' rc $?: $(grep -c '^PASS' "$O/ops-${o// /_}.log") pass $(grep -c '^FAIL' "$O/ops-${o// /_}.log") fail"
  grep "^FAIL" "$O/ops-${o// /_}.log" | head -3
done
PARITY_ONLY='qwen3|llama' CINFER=$PWD/$C timeout 90 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_paged > $O/test_paged.log 2>&1; ts "test_paged rc $? $(grep -c ^PASS $O/test_paged.log) pass $(grep -c ^FAIL $O/test_paged.log) fail"
wait; ts "made $(du -sh $BD/qwen3-8b-12l | cut -f1)"
b() { timeout 30 $1 bench --model $BD/qwen3-8b-12l --device cuda --prompt-len $2 --depth $3 --gen 2 --reps 3 2>&1 | grep -E "^prefill" | sed 's/  */ /g' | cut -c14-60; }
for s in "124 1372" "216 1280" "124 0" "1000 0" "4096 0" "124 1372"; do ts "$s before: $(b $B $s) | after: $(b $C $s)"; done
SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_STEPS="make chat" BENCH_DIR=$BD SERVE_BUDGET=170 CINFER=$C timeout 190 bash bench/serve_cuda.sh > $O/chat.txt 2>&1
ts "chat rc $?"; grep -E "CHAT|FAIL" $O/chat.txt | head -12
ts end
