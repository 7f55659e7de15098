#!/bin/bash
# 2026-12-06 (forty-first session), first of two calls back to back: qt_stage's group sums made in its
# float4 pass (each unit's 4 / 8 columns in order, then a butterfly over the group's units) instead
# of a warp a group afterwards; the experts' down kernel stages its h rows as float4s only (qt_stage
# ALIGNED). The affine kernels' sums of x change order, so their bits change: the quantized op tests,
# the suite's parity (the mlx fixtures against transformers), batched rows = alone, memcheck. Then the
# Qwen3-30B-A3B dims 12-layer mlx4 checkpoint made in /tmp and the staged tree kept in /tmp/newgpu.
# Next: 2026-12-06zm-gsum-prev.sh.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  rm -rf /tmp/q30 ) &
mk=$!
for f in "cuda q" moe_experts norm_matmul; do
  timeout 150 $T --only "$f" > $O/ops.log 2>&1; echo "ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
done
CINFER=$C timeout 240 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "parity rc=$?: $(grep -E 'passed|failed' $O/parity.log | tail -1)"; grep -E "FAIL" $O/parity.log | head -6
CINFER_TEST_DEVICE=cuda timeout 120 .gpu/tests/test_batch_argmax > $O/batch.log 2>&1; echo "batch rc=$?: $(tail -1 $O/batch.log)"
for f in mlx_qwen3_moe_4bit mlx_qwen3_8bit_tied; do
  timeout 120 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/$f --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc-$f.log 2>&1
  echo "memcheck $f rc=$? $(grep -E 'ERROR SUMMARY' $O/mc-$f.log)"
done
wait $mk; ts "made $(du -sh /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ')"
ts end
