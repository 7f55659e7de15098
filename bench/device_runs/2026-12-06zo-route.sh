#!/bin/bash
# 2026-12-06 (forty-second session), one call, one lib with two runtime switches:
#  - CINFER_CUDA_QT_USUM (qt_stage's group sums in its float4 pass; =0: a warp a group after the
#    pairs). Changes the affine kernels' sums' order, so their bits: quantized ops, mlx parity.
#  - CINFER_CUDA_ROUTE_FUSE (moe_norm_experts' routing inside the quantized / fp8 experts' gate+up
#    launch; =0: moe_route's own launch). Same bits: ops moe_norm_experts (fused = three ops),
#    `logits --step` of the MoE mlx / fp8 fixtures cmp-identical on and off.
# Then decode after 512: Qwen3-30B-A3B dims 12L mlx4 (usum/route 1/1, 1/0, 0/0, three rounds) and
# DeepSeek-V2-Lite dims 14L fp8 (route 1 / 0, two rounds), alternating.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  rm -rf /tmp/q30
  nice -n 5 timeout 200 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 14 > $O/make-ds8.log 2>&1
  ts "q30 / ds8 made"
  nice -n 5 timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make-v4.log 2>&1; ts "v4 made" ) &
mk=$!
for f in moe_norm_experts "cuda q" norm_matmul moe_experts moe_route; do
  timeout 120 $T --only "$f" > $O/ops.log 2>&1; echo "ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -5
done
for fx in mlx_qwen3_moe_4bit mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_nemotron_h_4bit mlx_qwen3_5_moe_4bit mlx_lfm2_moe_6bit deepseek_v3_fp8 deepseek_v4_fp8; do
  for v in 1 0; do CINFER_CUDA_ROUTE_FUSE=$v timeout 30 $C logits --model tests/fixtures/$fx --tokens 1,5,9,22,7,3 --out /tmp/l$v.f32 --step --device cuda > $O/l$v.log 2>&1 || echo "logits $fx route=$v failed: $(tail -1 $O/l$v.log)"; done
  cmp -s /tmp/l1.f32 /tmp/l0.f32 && echo "cmp $fx: identical ($(stat -c %s /tmp/l1.f32) bytes)" || echo "cmp $fx: DIFFER"
done
PARITY_ONLY='mlx_|fp8' CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "parity (mlx_|fp8) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_batch_argmax > $O/batch.log 2>&1; echo "batch rc=$?: $(tail -1 $O/batch.log)"
for i in $(seq 150); do [ -f /tmp/ds8/config.json ] && ! pgrep -f "out /tmp/ds8" > /dev/null && break; sleep 2; done; ts "made $(du -sh /tmp/q30pair/mlx4 /tmp/ds8 2>&1 | tr '\n' ' ')"
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | head -1 | sed 's/  */ /g' | cut -c1-75; }
for r in 1 2 3; do
  for v in 11 10 00; do ts "q30 mlx4 r$r usum=${v:0:1} route=${v:1:1}: $(CINFER_CUDA_QT_USUM=${v:0:1} CINFER_CUDA_ROUTE_FUSE=${v:1:1} b /tmp/q30pair/mlx4)"; done
done
for r in 1 2; do
  for v in 1 0; do ts "ds8 fp8 r$r route=$v: $(CINFER_CUDA_ROUTE_FUSE=$v b /tmp/ds8)"; done
done
wait $mk
for r in 1 2; do
  for v in 1 0; do ts "v4-flash 4L fp8-fp4 r$r route=$v: $(CINFER_CUDA_ROUTE_FUSE=$v b /tmp/v4)"; done
done
timeout 90 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/mlx_qwen3_moe_4bit --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc.log 2>&1
echo "memcheck mlx_qwen3_moe_4bit rc=$? $(grep -E 'ERROR SUMMARY' $O/mc.log)"
timeout 90 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/deepseek_v3_fp8 --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc2.log 2>&1
echo "memcheck deepseek_v3_fp8 rc=$? $(grep -E 'ERROR SUMMARY' $O/mc2.log)"
ts end
