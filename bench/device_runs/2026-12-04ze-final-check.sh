#!/bin/bash
# 2026-12-04 (twenty-fourth session), last call: the final mla.cu (tiled kernel in a paged and an
# unpaged instance, call zd; decode kernel with the read-ahead, call zb / zc, one instance):
# test_cuda_ops' MLA and DSA cases and test_paged on the device.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
timeout 150 $T --only mla > $O/ops-mla.txt 2>&1; ts "ops mla rc $? $(grep -c '^PASS' $O/ops-mla.txt) pass $(grep -c '^FAIL' $O/ops-mla.txt) fail"
timeout 150 $T --only dsa > $O/ops-dsa.txt 2>&1; ts "ops dsa rc $? $(grep -c '^PASS' $O/ops-dsa.txt) pass $(grep -c '^FAIL' $O/ops-dsa.txt) fail"
grep '^FAIL' $O/ops-*.txt | head
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_paged 2>&1 | tail -4
PARITY_ONLY="^deepseek_v3$|^deepseek_v32$|^deepseek_v3_fp8$" CINFER=$PWD/$C timeout 100 bash tests/gpu/parity.sh 2>&1 | grep -E "deepseek|passed|FAIL" | tail -8
