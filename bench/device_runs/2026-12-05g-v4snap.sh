#!/bin/bash
# 2026-12-05 (thirtieth session), last call: DeepSeek V4's snapshots with their floats held in
# device memory (device-to-device copies): test_snapshot, test_paged and the serve-v4 step on CUDA.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
for t in test_snapshot test_paged; do
  CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
  grep -E "^FAIL" $O/$t.log | head -5
done
GPU_STEPS="serve-v4" OUT=$O/suite timeout 60 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "serve-v4 rc $?"; grep serve-v4 $O/suite.txt
ts end
