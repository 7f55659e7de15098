# 2026-12-03 (sixteenth session): V4's q_a and kv products of one input, and the shared expert's
# gate and up, through matmul_n (one launch each on the device; the CPU's bits unchanged):
# parity of every deepseek_v4* fixture on the device.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
PARITY_ONLY='deepseek_v4' CINFER=$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8
ts end
