#!/bin/bash
# Fifty-third session: #16's rows on an H200 with MLA on tensor cores (e5e4538's defaults) against
# TC=0 (the CUDA cores: main before): ds14 (DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16)
# after 512 and 4096, alternating, two rounds (a3b12, no MLA, left out: the session's last 327 s of
# device time). Staging: `make gpu-stage`, carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
[ -d $D ] || timeout 200 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
ts made
b() { timeout -k 5 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for r in 1 2; do for p in 512 4096; do
  for a in 0 2; do echo "ds14 r$r after $p MLA_TC=$a: $(CINFER_CUDA_MLA_TC=$a b $D $p)"; done
done; done
ts end
