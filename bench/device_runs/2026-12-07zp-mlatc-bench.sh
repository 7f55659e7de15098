#!/bin/bash
# Fifty-third session, after 2026-12-07zo-mlatc.sh on the same warm machine (ds14 made there; made
# here if not): ds14 (DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16) decode after 4096 and
# 512, alternating, two rounds: MLA on the CUDA cores as before (TC=0 CSLICE=0), tensor cores with
# each combine, runs of 2 / 4 tiles, TC=2 (the prefill too: pp printed); ncu of the MLA kernels of
# a decode step at 4096. Staging: `make gpu-stage`, carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
[ -d $D ] || timeout 300 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
ts made
b() { timeout -k 5 60 $C bench --model $D --device cuda --prompt-len $1 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for r in 1 2; do
  for sw in 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_CSLICE=0' 'CINFER_CUDA_MLA_CSLICE=0' '' 'CINFER_CUDA_MLA_TC_RUN=2' \
            'CINFER_CUDA_MLA_TC_RUN=4' 'CINFER_CUDA_MLA_TC=2'; do
    echo "ds14 r$r after 4096 [$sw]: $(env $sw bash -c "$(declare -f b); C=$C D=$D b 4096")"
  done
  for sw in 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_CSLICE=0' '' 'CINFER_CUDA_MLA_TC_RUN=2'; do
    echo "ds14 r$r after 512 [$sw]: $(env $sw bash -c "$(declare -f b); C=$C D=$D b 512")"
  done
done
ts bench
timeout 120 ncu -k "regex:mla_tc_kernel|mla_combine" -c 4 $C bench --model $D --device cuda --prompt-len 4096 --gen 2 > /tmp/ncu.log 2>&1
grep -E '^  [a-z_].*mla_|Duration' /tmp/ncu.log | cut -c1-120 | head -20
ts end
