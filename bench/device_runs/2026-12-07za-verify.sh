#!/bin/bash
# 2026-12-07 (fifty-first session): main at 010cb06 on the device for the first time (e14e360's
# `moe_norm_experts shared` early = late check, 010cb06's moe_fused dispatch): the first half of the GPU
# suite (ops ops-alt ops-flash batch snapshot parity, --quick) and the early = late check in full, then
# decode after 512 / 4096 of ds14 and a3b12 (#16's rows) on whichever card this is.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~8 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 M=/tmp/a3b12
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  ts made ) &
timeout 120 $T --only "moe_norm_experts shared" > $O/ops2.log 2>&1
echo "ops moe_norm_experts shared rc=$?: $(grep -c '^PASS' $O/ops2.log) PASS, $(grep -c '^FAIL' $O/ops2.log) FAIL"; grep ^FAIL $O/ops2.log | head -4
OUT=$O/suite GPU_STEPS="ops ops-alt ops-flash batch snapshot parity" timeout 320 bash tests/gpu/run.sh --quick > $O/suite.log 2>&1
tail -22 $O/suite.log
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 90 $C bench --model $1 --device cuda --prompt-len ${2:-512} --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do for mm in $D $M; do echo "$(basename $mm) r$r: $(b $mm)"; done; done
echo "ds14 after 4096: $(b $D 4096)"
echo "a3b12 after 4096: $(b $M 4096)"
ts end
