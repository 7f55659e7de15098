#!/bin/bash
# 2026-12-06 (forty-first session), one call: qt_stage's group sums made in its float4 pass (each unit's
# 4 / 8 columns in order, then a butterfly over the group's units; CINFER_CUDA_QT_USUM=1, the default)
# against a warp a group after the pairs (=0, 51a0390's form), one lib. The affine kernels' sums of x
# change order, so their bits change: the quantized op tests both ways, the suite's parity (the mlx
# fixtures against transformers), batched rows = alone, memcheck; then Qwen3-30B-A3B dims 12 layers mlx4
# decode after 512 alternating the switch, three rounds.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  rm -rf /tmp/q30 ) &
mk=$!
for f in "cuda q" norm_matmul moe_experts; do
  timeout 100 $T --only "$f" > $O/ops.log 2>&1; echo "ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
done
PARITY_ONLY=mlx_ CINFER=$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "parity (mlx_) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
wait $mk; ts "made $(du -sh /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ')"
b() { timeout 60 $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | head -1 | sed 's/  */ /g' | cut -c1-75; }
for r in 1 2 3; do
  for v in 1 0; do ts "r$r usum=$v: $(CINFER_CUDA_QT_USUM=$v b)"; done
done
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_batch_argmax > $O/batch.log 2>&1; echo "batch rc=$?: $(tail -1 $O/batch.log)"
timeout 60 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/mlx_qwen3_moe_4bit --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc.log 2>&1
echo "memcheck mlx_qwen3_moe_4bit rc=$? $(grep -E 'ERROR SUMMARY' $O/mc.log)"
ts end
