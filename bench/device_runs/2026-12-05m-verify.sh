#!/bin/bash
# 2026-12-05 (thirty-first session), last call: the session's final code on more of the GPU suite
# than call l reached (the flash prefill, rmsnorm and grouped 16-bit GEMMs serve every family):
# parity of every fixture, test_cuda_ops --quick, test_batch_argmax / test_snapshot on CUDA, the
# serve step (tests/gpu/run.sh).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
CINFER=$PWD/$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep -E '^FAIL' $O/parity.log | head -5
timeout 100 $T --quick > $O/ops.log 2>&1; ts "ops --quick rc $?: $(grep -c '^PASS' $O/ops.log) pass $(grep -c '^FAIL' $O/ops.log) fail"; grep "^FAIL" $O/ops.log | head -5
for t in test_batch_argmax test_snapshot; do
  CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
done
GPU_STEPS="serve" OUT=$O/suite timeout 60 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "serve rc $?"; grep -E "^serve" $O/suite.txt
ts end
