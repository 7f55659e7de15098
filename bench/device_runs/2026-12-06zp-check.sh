#!/bin/bash
# 2026-12-06 (forty-second session), first of two calls back to back: the build where qt_stage's
# pair-at-a-time fallback (x not 16-byte aligned) sums each group in the float4 form's order (so x
# aligned or not gives the same bits with CINFER_CUDA_QT_USUM on, as test_cuda_ops' qbatch checks):
# the quantized ops with the switch on and off, the mlx / fp8 parity; then copies the binaries to
# /tmp/newgpu and makes Qwen3-30B-A3B dims 2 layers mlx4 for the second call (2026-12-06zq-prof.sh).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
( nice -n 5 timeout 100 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q2 --dtype bf16 --seed 1 --layers 2 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 100 python3 bench/make_q4_pair.py /tmp/q2 2 /tmp/q2pair /nonexistent > $O/make-q4.log 2>&1; ts "q2 made" ) &
mk=$!
for u in 1 0; do
  for f in "cuda q" norm_matmul; do
    CINFER_CUDA_QT_USUM=$u timeout 100 $T --only "$f" > $O/ops.log 2>&1; echo "usum=$u ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
  done
done
timeout 120 $T --only "moe_norm_experts router bf16 experts a4b" > $O/ops.log 2>&1; echo "ops moe_norm_experts (a4b, bf16 router) rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"
PARITY_ONLY='mlx_|fp8' CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "parity (mlx_|fp8) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
wait $mk; ls /tmp/q2pair/mlx4/config.json
ts end
