#!/bin/bash
# 2026-12-06 (forty-first session), first of two calls back to back: qt_stage's norm pass with its
# loads issued 8 at a time (QT_SB) and its pairs made from float4 units (8 columns a 4-bit unit, 4 an
# 8-bit one, two 8-byte shared stores a row) instead of a pair at a time. This call: op tests, logits
# --step of the 15 quantized fixtures (kept in /tmp), memcheck of three quantized steps, the bench
# checkpoints made (12 layers; 2-layer twins for the phase marks), the staged tree kept in /tmp/newgpu.
# Next: 2026-12-06zk-vec-old.sh.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  rm -rf /tmp/q30
  nice -n 5 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 14 > $O/makeds.log 2>&1
  nice -n 5 timeout 100 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30s --dtype bf16 --seed 1 --layers 2 > $O/make2.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 100 python3 bench/make_q4_pair.py /tmp/q30s 2 /tmp/q30spair /nonexistent > $O/make-q4s.log 2>&1 ) &
mk=$!
for f in "cuda q" moe_experts norm_matmul; do
  timeout 150 $T --only "$f" > $O/ops.log 2>&1; echo "ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
done
for f in deepseek_v3_fp8 deepseek_v4_fp8 mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_lfm2_4bit mlx_lfm2_moe_6bit mlx_llama_4bit mlx_llama_mxfp4 mlx_nemotron_h_4bit mlx_qwen3_5_8bit_tied mlx_qwen3_5_moe_4bit mlx_qwen3_8bit_tied mlx_qwen3_mixed mlx_qwen3_moe_4bit mlx_qwen3_next_4bit; do
  timeout 60 $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/lnew_$f.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f failed: $(tail -2 /tmp/l.log)"
done
ls /tmp/lnew_*.f32 | wc -l
for f in mlx_qwen3_moe_4bit mlx_qwen3_8bit_tied deepseek_v3_fp8; do
  timeout 120 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/$f --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc-$f.log 2>&1
  echo "memcheck $f rc=$? $(grep -E 'ERROR SUMMARY' $O/mc-$f.log)"
done
wait $mk; ts "made $(du -sh /tmp/q30pair/mlx4 /tmp/ds8 /tmp/q30spair/mlx4 2>&1 | tr '\n' ' ')"
ts end
