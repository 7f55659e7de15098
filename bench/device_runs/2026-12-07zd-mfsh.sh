#!/bin/bash
# 2026-12-07 (forty-ninth session), second call: moe_fused with the shared expert as a template flag (SH), so a
# call without one runs the routed loops alone again (124 registers, as 4fc888b) instead of the forty-eighth
# session's one form (128, the shared units and steps tested in the hot loops), which ran 1.0-2.2% below the
# three ops on an H100 in call zc (830-839 against 846-849 tok/s; the forty-seventh session's form ran 890-903).
# CINFER_CUDA_MF_GENERIC=1: the one form again. Qwen3-30B-A3B dims 12 layers bf16, three rounds alternating, and
# moe_norm_experts' router cases (fused = three ops, bit for bit).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
M=/tmp/a3b12
[ -d $M ] || timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts made
timeout 40 $T --only "moe_norm_experts router bf16 experts bf16" > $O/ops.log 2>&1
echo "ops rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -3
b() { env $1 timeout -k 5 40 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in $(seq 1 ${ZD_ROUNDS:-3}); do
  for e in CINFER_CUDA_MF_GENERIC=0 CINFER_CUDA_MF_GENERIC=1 CINFER_CUDA_MOE_FUSE=0; do echo "a3b12 r$r $e: $(b $e)"; done
done
ts end
