#!/bin/bash
# (ran on the code of the raw-params commit, reverted after: not measurably faster)
# 2026-12-06 (fortieth session), first of two calls back to back: the quantized GEMVs keep a batch's
# params as loaded (raw bits) and make them floats where applied (quant_mma.cuh qt_buf / qt_sval): the
# conversion at the load made the warp wait for each batch's params a batch early (fp8's E8M0 scales,
# mxfp4's, f32 / 16-bit affine params off the window). New lib: quantized op tests, logits --step of the
# 15 quantized fixtures kept in /tmp, the bench checkpoints made (DeepSeek-V4-Flash dims 4 layers
# fp8-fp4, Qwen3-30B-A3B dims 12 layers mlx4), the staged binary in /tmp/newgpu.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
( nice -n 5 timeout 150 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/makev4.log 2>&1
  nice -n 5 timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 150 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  rm -rf /tmp/q30 ) &
mk=$!
for f in "cuda q" moe_experts; do
  timeout 100 $T --only "$f" > $O/ops.log 2>&1; echo "ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
done
for f in deepseek_v3_fp8 deepseek_v4_fp8 mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_lfm2_4bit mlx_lfm2_moe_6bit mlx_llama_4bit mlx_llama_mxfp4 mlx_nemotron_h_4bit mlx_qwen3_5_8bit_tied mlx_qwen3_5_moe_4bit mlx_qwen3_8bit_tied mlx_qwen3_mixed mlx_qwen3_moe_4bit mlx_qwen3_next_4bit; do
  timeout 60 $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/lnew_$f.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f failed: $(tail -2 /tmp/l.log)"
done
timeout 120 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/deepseek_v4_fp8 --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc.log 2>&1
echo "memcheck deepseek_v4_fp8 rc=$? $(grep -E 'ERROR SUMMARY' $O/mc.log)"
wait $mk; ts "made $(du -sh /tmp/v4 /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ')"
ts end
