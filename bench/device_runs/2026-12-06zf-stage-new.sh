#!/bin/bash
# 2026-12-06 (forty-first session), first of two calls back to back: qt_stage's loads issued in batches
# (quant_mma.cuh QT_SB / QT_SP / QT_SS: the norm pass, the pairs and the group sums had waited an L2 / DRAM
# round trip a load) and the routed experts' matrices at computed addresses (cb_estride, switch
# CINFER_CUDA_QT_ESTRIDE); the ssd_scan test's reference in the device's form. This call: op tests, logits
# --step of the 15 quantized fixtures (estride on and off, kept in /tmp), memcheck of three quantized
# steps, the bench checkpoints made, the staged binaries kept in /tmp/newgpu. Next: 2026-12-06zg-stage-old.sh.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/newgpu && cp -r .gpu /tmp/newgpu
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  rm -rf /tmp/q30
  nice -n 5 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 14 > $O/makeds.log 2>&1 ) &
mk=$!
for f in "cuda q" moe_ norm_matmul ssd_scan; do
  timeout 150 $T --only "$f" > $O/ops.log 2>&1; echo "ops '$f' rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"; grep -E "^FAIL" $O/ops.log | head -4
done
CINFER_CUDA_QT_ESTRIDE=0 timeout 150 $T --only moe_experts > $O/ops.log 2>&1; echo "ops moe_experts ESTRIDE=0 rc=$?: $(grep -E 'passed' $O/ops.log | tail -1)"
FX="deepseek_v3_fp8 deepseek_v4_fp8 mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_lfm2_4bit mlx_lfm2_moe_6bit mlx_llama_4bit mlx_llama_mxfp4 mlx_nemotron_h_4bit mlx_qwen3_5_8bit_tied mlx_qwen3_5_moe_4bit mlx_qwen3_8bit_tied mlx_qwen3_mixed mlx_qwen3_moe_4bit mlx_qwen3_next_4bit"
same=0; diff=0
for f in $FX; do
  timeout 60 $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/lnew_$f.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f failed: $(tail -2 /tmp/l.log)"
  CINFER_CUDA_QT_ESTRIDE=0 timeout 60 $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/lnes_$f.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f (estride 0) failed: $(tail -2 /tmp/l.log)"
  if cmp -s /tmp/lnew_$f.f32 /tmp/lnes_$f.f32; then same=$((same+1)); else diff=$((diff+1)); echo "step $f: estride on / off DIFFER"; fi
done
echo "logits --step estride on vs off: $same same, $diff differ"
for f in mlx_qwen3_moe_4bit deepseek_v3_fp8 mlx_deepseek_v4_4bit; do
  timeout 120 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/$f --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc-$f.log 2>&1
  echo "memcheck $f rc=$? $(grep -E 'ERROR SUMMARY' $O/mc-$f.log)"
done
wait $mk; ts "made $(du -sh /tmp/q30pair/mlx4 /tmp/ds8 2>&1 | tr '\n' ' ')"
ts end
