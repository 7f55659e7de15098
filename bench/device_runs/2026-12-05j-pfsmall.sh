#!/bin/bash
# 2026-12-05 (thirty-first session), third call: a small prefill after a cached prefix (issue #19's
# chat turn). The flash prefill kernel's Q and K / V loads issued together and its key segments by
# whole waves over the chunk's real key bound (ci_runner.keys); 16-bit GEMMs of one input
# converting it once with the RMSNorm in that launch; rmsnorm's loads in rounds; swiglu by float4.
# Checks: test_cuda_ops (all), parity (all fixtures), test_paged / batch / snapshot on CUDA. Then
# Qwen3-8B dims 12 layers bf16 (make-random --seed 1) prefill before (7a1cb09: binary + lib,
# carried as .gpuz/before.tar.xz) / after, alternating; ncu's kernel list of the 124@1372 prefill
# (after); serve_cuda.sh's 5-turn chat (reuse against --prefix-cache-mb 0).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/bef && tar xJf .gpuz/before.tar.xz -C /tmp/bef
B=/tmp/bef/cinfer
ts start
BD=/tmp/cb; mkdir -p $BD
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 ) &
timeout 240 $T > $O/ops.log 2>&1; ts "ops rc $?: $(tail -1 $O/ops.log)"; grep "^FAIL" $O/ops.log | head -8
grep -c "grouped gemm16" $O/ops.log
CINFER=$PWD/$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
for t in test_paged test_batch_argmax test_snapshot; do
  CINFER_TEST_DEVICE=cuda timeout 90 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
  grep -E "^FAIL" $O/$t.log | head -3
done
wait; ts "made $(du -sh $BD/qwen3-8b-12l | cut -f1)"
b() { timeout 60 $1 bench --model $BD/qwen3-8b-12l --device cuda --prompt-len $2 --depth $3 --gen 4 --reps 3 2>&1 | grep -E "^prefill" | sed 's/  */ /g' | cut -c14-70; }
for r in 1 2; do
  for s in "124 1372" "216 1280" "124 0" "344 1920" "1000 0" "1496 0" "4096 0"; do ts "r$r $s before: $(b $B $s) | after: $(b $C $s)"; done
done
timeout 120 $NCU --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 --no-graphs > $O/ncu124.csv 2> $O/ncu124.err
ts "ncu rc $?"
SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_STEPS="make chat" BENCH_DIR=$BD SERVE_BUDGET=200 CINFER=$C timeout 230 bash bench/serve_cuda.sh > $O/chat.txt 2>&1
ts "chat rc $?"; grep -E "CHAT|FAIL" $O/chat.txt | head -12
timeout 110 bash bench/device_runs/2026-12-05k-ttft.sh 2>&1 | grep -E "TURN|server"
ts end
