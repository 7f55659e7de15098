#!/bin/bash
# (ran on the code of 022ee9b, the row copy since reverted; CINFER_CUDA_QT_RAW existed there)
# 2026-12-06 (fortieth session), second call: qt_stage reading its rows from a shared copy
# (quant_mma.cuh qt_raw_*: one cp.async round trip instead of ~8 dependent L2 loads; the norm
# weight's copy before pdl_enter; the experts' rows issued before their ids are read). Ops (all),
# memcheck of quantized steps, logits --step of the quantized fixtures CINFER_CUDA_QT_RAW=1 vs 0
# (cmp: the same bits), then decode tok/s alternating RAW 1 / 0, two rounds: Qwen3-30B-A3B dims 12
# layers mlx4 and DeepSeek-V2-Lite dims 14 layers fp8.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
  nice -n 5 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 14 > $O/makeds.log 2>&1 ) &
mk=$!
timeout 240 $T > $O/ops.log 2>&1; echo "ops rc=$?: $(grep -E 'PASS|passed' $O/ops.log | tail -1)"; grep -E "FAIL" $O/ops.log | head -5
for f in deepseek_v3_fp8 deepseek_v4_fp8 mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_lfm2_4bit mlx_lfm2_moe_6bit mlx_llama_4bit mlx_llama_mxfp4 mlx_nemotron_h_4bit mlx_qwen3_5_8bit_tied mlx_qwen3_5_moe_4bit mlx_qwen3_8bit_tied mlx_qwen3_mixed mlx_qwen3_moe_4bit mlx_qwen3_next_4bit; do
  fx=tests/fixtures/$f
  for sw in 1 0; do
    CINFER_CUDA_QT_RAW=$sw timeout 60 $C logits --model $fx --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f raw=$sw failed: $(tail -2 /tmp/l.log)"
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "step $f: same" || echo "step $f: DIFFER"
done
for f in mlx_qwen3_moe_4bit deepseek_v3_fp8 mlx_qwen3_5_8bit_tied; do
  timeout 120 $SAN --tool memcheck --error-exitcode 9 $C logits --model tests/fixtures/$f --tokens 1,5,9,22 --out /tmp/m.f32 --step --device cuda > $O/mc-$f.log 2>&1
  echo "memcheck $f rc=$? $(grep -E 'ERROR SUMMARY' $O/mc-$f.log)"
done
ts "checks done"
wait $mk; ts "made $(tail -1 $O/make-q4.log | cut -c1-60)"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed 's/  */ /g' | cut -c1-75; }
for r in 1 2; do
  for sw in 1 0; do
    ts "r$r mlx4 raw=$sw: $(CINFER_CUDA_QT_RAW=$sw b $C bench --model /tmp/q30pair/mlx4)"
    ts "r$r ds8  raw=$sw: $(CINFER_CUDA_QT_RAW=$sw b $C bench --model /tmp/ds8)"
  done
done
ts end
