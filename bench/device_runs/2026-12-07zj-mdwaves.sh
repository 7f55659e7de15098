#!/bin/bash
# 2026-12-07 (fiftieth session): DeepSeek-V2-Lite dims decode after 4096 ran at 0.89x its rate after 512 (call zi:
# 549.8 against 617.5; #16 asks within 10%); mla_decode_kernel takes 20-21 us a layer there (33 runs of ~124 keys,
# 2 blocks an SM). The runs aimed at 2 blocks an SM against more (CINFER_CUDA_MD_WAVES, measuring): test_cuda_ops
# mla_attend with 4, then decode after 4096, alternating. Staging: `make gpu-stage`, carry [".gpuz"]; ~3 min.
# A record: the measuring switches it names were removed after it ran (bench/RESULTS.md, fiftieth session).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1; ts made ) &
CINFER_CUDA_MD_WAVES=4 timeout 60 $T --only "mla_attend" > $O/ops.log 2>&1
echo "ops mla_attend MD_WAVES=4 rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { env $1 timeout -k 5 90 $C bench --model $D --device cuda --prompt-len ${2:-4096} --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do for w in 2 3 4 6; do echo "ds14 after 4096 r$r MD_WAVES=$w: $(b CINFER_CUDA_MD_WAVES=$w)"; done; done
echo "ds14 after 512 MD_WAVES=2: $(b CINFER_CUDA_MD_WAVES=2 512)"
ts end
