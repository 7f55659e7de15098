#!/bin/bash
# 2026-12-06 (forty-third session; 371 s of device time left from the forty-second's budget): the
# check that 2026-12-06zp-check.sh was to make and did not (the forty-second session was cut off
# before it ran), cut to what fits: qt_stage's pair-at-a-time fallback (x not 16-byte aligned)
# summing each group in the float4 form's order (b0a94e6), so test_cuda_ops' qbatch check
# ("x unaligned differs from x aligned", 18 failures on the H100 before it) passes with
# CINFER_CUDA_QT_USUM on; then the fused routing op and the mlx / fp8 parity, as time allows.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
for f in "cuda q" norm_matmul; do
  CINFER_CUDA_QT_USUM=1 timeout 90 $T --only "$f" > $O/ops.log 2>&1; echo "usum=1 ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
done
ts ops
timeout 60 $T --only "moe_norm_experts" > $O/ops2.log 2>&1; echo "ops moe_norm_experts rc=$?: $(grep -E 'passed' $O/ops2.log | tail -1)"; grep -E "^FAIL" $O/ops2.log | head -4
ts moe
PARITY_ONLY='mlx_' CINFER=$C timeout 90 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "parity (mlx_) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts end
