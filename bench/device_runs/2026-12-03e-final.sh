#!/bin/bash
# (bench/RESULTS.md, thirteenth session, 2026-12-03: one device call from the repository root with
# .gpuz carried.) The GPU suite on the session's last code (fp8 tensor-core GEMVs, the MLA / MoE
# fusions, V3.2 keeping q_a's norm unfused), then DeepSeek V2-Lite dims q_lora 1024 14 layers fp8 /
# bf16 decode after 512 and 4096, alternating, 2 rounds.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
OUT=$O bash tests/gpu/run.sh 2>&1 | tail -13
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds-q1024.json
for dt in bf16 fp8; do $C make-random --config /tmp/ds-q1024.json --out /tmp/ds-$dt --dtype $dt --seed 1 --layers 14 > /dev/null; done
ts made
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-90 | tr '\n' ' '; }
for r in 1 2; do for p in 512 4096; do
  ts "r$r fp8 p$p: $(b /tmp/ds-fp8 $p)"
  ts "r$r bf16 p$p: $(b /tmp/ds-bf16 $p)"
done; done
ts end
