#!/bin/bash
# For the next device time (fifty-second session wrote it, not yet run): #16's rows on the H200 with the
# MLA combine in column blocks (CINFER_CUDA_MLA_COMB 128, the default since aafdea5) against the whole-row
# blocks (0): ds14 (DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16) and a3b12 (Qwen3-30B-A3B dims, 12
# layers bf16; no MLA: a control) decode after 512 and 4096, alternating, two rounds; pp512 printed.
# First the DeepSeek GPU parity on the default. Staging: `make gpu-stage`, carry [".gpuz"]; ~5 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 M=/tmp/a3b12
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 300 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $M ] || timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  ts made ) &
PARITY_ONLY='deepseek' CINFER=$C timeout 60 bash tests/gpu/parity.sh > /tmp/par.log 2>&1
echo "parity deepseek rc=$?: $(grep -cE '^PASS' /tmp/par.log) PASS, $(grep -cE '^FAIL' /tmp/par.log) FAIL"; grep -E '^FAIL' /tmp/par.log | head -4
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 90 $C bench --model $1 --device cuda --prompt-len $2 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for r in 1 2; do for mm in $D $M; do for p in 512 4096; do for a in 0 128; do
  echo "$(basename $mm) r$r after $p MLA_COMB=$a: $(CINFER_CUDA_MLA_COMB=$a b $mm $p)"
done; done; done; done
ts end
