#!/bin/bash
# 2026-12-06 (forty-second session), first of two calls back to back: the build where qt_stage's
# pair-at-a-time fallback (x not 16-byte aligned) sums each group in the float4 form's order (so x
# aligned or not gives the same bits with CINFER_CUDA_QT_USUM on, as test_cuda_ops' qbatch checks):
# the quantized ops with the switch on and off, the mlx / fp8 parity; copies the binaries to
# /tmp/newgpu for a second call (2026-12-06zq-prof.sh, which would also need /tmp/q2pair: not run,
# the session's device time ran out after refusals).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
for u in 1 0; do
  for f in "cuda q" norm_matmul; do
    CINFER_CUDA_QT_USUM=$u timeout 100 $T --only "$f" > $O/ops.log 2>&1; echo "usum=$u ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
  done
done
timeout 120 $T --only "moe_norm_experts router bf16 experts a4b" > $O/ops.log 2>&1; echo "ops moe_norm_experts (a4b, bf16 router) rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"
PARITY_ONLY='mlx_|fp8' CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "parity (mlx_|fp8) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_batch_argmax > $O/batch.log 2>&1; echo "batch rc=$?: $(tail -1 $O/batch.log)"
timeout 120 $SAN --tool memcheck --error-exitcode 9 $T --only "experts a4b g32" > $O/mco.log 2>&1; echo "memcheck ops 'experts a4b g32' rc=$?: $(grep -E 'passed' $O/mco.log | tail -1) $(grep -E 'ERROR SUMMARY' $O/mco.log)"
ts end
