#!/bin/bash
# (bench/RESULTS.md, thirteenth session, 2026-12-03: one device call from the repository root with
# .gpuz carried.) fp8 E4M3 decode GEMVs on tensor cores (quant_mma.cu cb_qt_fp8, quant_mma_moe.cu
# cb_qt_moe_fp8): the GPU suite, then DeepSeek V2-Lite dims with q_lora 1024, 14 layers, bf16 and
# its fp8 twin, decode after 512 (and pp512), CINFER_CUDA_QMMA 1 / 0 alternating, 2 rounds.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
OUT=$O bash tests/gpu/run.sh 2>&1 | tail -13
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds-q1024.json
for dt in bf16 fp8; do
  [ -d /tmp/ds-$dt ] || $C make-random --config /tmp/ds-q1024.json --out /tmp/ds-$dt --dtype $dt --seed 1 --layers 14 > /dev/null
done
ts made
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-90 | tr '\n' ' '; }
for r in 1 2; do
  ts "r$r fp8 qmma=1: $(CINFER_CUDA_QMMA=1 b /tmp/ds-fp8)"
  ts "r$r fp8 qmma=0: $(CINFER_CUDA_QMMA=0 b /tmp/ds-fp8)"
  ts "r$r bf16:       $(b /tmp/ds-bf16)"
done
ts end
