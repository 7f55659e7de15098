#!/bin/bash
# 2026-12-07 (forty-ninth session), for the next device call (its starts here were refused): (1) moe_fused with
# the shared expert as a template flag (SH, c008e44), so a call without one runs the routed loops alone again
# (124 registers, as 4fc888b) instead of the forty-eighth session's one form (128, the shared units' and steps'
# tests in the hot loops), which ran 1.0-2.7% below the three ops on an H100 in call zc (826-839 against 846-849
# tok/s; the forty-seventh session's form ran 890-903). CINFER_CUDA_MF_GENERIC=1: that one form again;
# CINFER_CUDA_MOE_FUSE=0: the three ops. (2) with ZD_MORE=1: the shared-expert fold (CINFER_CUDA_MOE_SHARED) on
# Qwen3.5-35B-A3B dims, whose σ-gated shared expert is five launches + an add unfolded (DeepSeek's two measured
# level), and DeepSeek-V2-Lite dims with the fold. Decide from it: CB_MOE_FUSE (cuda_internal.h) stays 1 only if
# MF_GENERIC=0 beats MOE_FUSE=0; remove the MF_GENERIC switch either way; CB_MOE_SHARED to 1 only if faster.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~3 min (ZD_ROUNDS=2), ~6 with ZD_MORE=1.
# A record: the measuring switches it names were removed after it ran (bench/RESULTS.md, fiftieth session).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
M=/tmp/a3b12 Q=/tmp/q35 D=/tmp/ds14
[ -d $M ] || timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
if [ "${ZD_MORE:-0}" = 1 ]; then
  sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
  ( [ -d $Q ] || timeout 240 $C make-random --config bench/qwen3.5-35b-a3b.config.json --out $Q --dtype bf16 --seed 1 --layers 8 > $O/make3.log 2>&1
    [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make2.log 2>&1 ) &
fi
ts made
timeout 40 $T --only "moe_norm_experts router bf16 experts bf16" > $O/ops.log 2>&1
echo "ops rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -3
b() { env $1 timeout -k 5 40 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in $(seq 1 ${ZD_ROUNDS:-3}); do
  for e in CINFER_CUDA_MF_GENERIC=0 CINFER_CUDA_MF_GENERIC=1 CINFER_CUDA_MOE_FUSE=0; do echo "a3b12 r$r $e: $(b $e $M)"; done
done
if [ "${ZD_MORE:-0}" = 1 ]; then
  wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
  for r in 1 2; do
    for e in CINFER_CUDA_MOE_SHARED=1 CINFER_CUDA_MOE_SHARED=0; do
      echo "q35 r$r $e: $(b $e $Q)"; echo "ds14 r$r $e: $(b $e $D)"; done
  done
fi
ts end
