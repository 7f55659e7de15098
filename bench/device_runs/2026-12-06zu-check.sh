#!/bin/bash
# 2026-12-06 (forty-sixth session): the rest of the check of e717514 after zt-check.sh (whose 60 s
# for test_cuda_ops' moe_norm_experts was too short: its 98 cases take ~77 s on the H100; it
# stopped at 81 passed, none failed): moe_norm_experts again, the whole of test_cuda_ops, and the
# whole GPU parity suite. Run as three calls on one warm machine; one script here.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts a; timeout 200 $T --only moe_norm_experts > $O/moe.log 2>&1; echo "moe rc=$? $(grep passed $O/moe.log | tail -1)"; grep ^FAIL $O/moe.log | head
ts b; timeout 320 $T > $O/all.log 2>&1; echo "all rc=$? $(grep passed $O/all.log | tail -1)"; grep ^FAIL $O/all.log | head
ts c; CINFER=$C timeout 450 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "parity rc=$? $(grep -cE '^PASS' $O/parity.log) PASS $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E '^FAIL' $O/parity.log | head
ts end
