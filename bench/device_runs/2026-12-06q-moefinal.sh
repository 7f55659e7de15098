#!/bin/bash
# 2026-12-06 (thirty-ninth session), sixth call: the one-launch MoE decode as kept (16 warps a block,
# the 8 / 32-warp forms and the L2 asks removed, on by default). Ops quick (moe_norm_experts and
# the other moe_ cases), logits --step cmp fused against CINFER_CUDA_MOE_FUSE=0, decode tok/s
# alternating, two rounds, Qwen3-30B-A3B dims 12 layers bf16.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1) &
mk=$!
timeout 150 $T --quick --only moe_ > $O/ops.log 2>&1; rc=$?
echo "ops moe_ (default: fused) rc=$rc: $(grep -E 'passed|failed' $O/ops.log | tail -1)"
[ $rc = 0 ] || grep -iE "fail" $O/ops.log | head -8
for f in qwen3_moe deepseek_v3 deepseek_v32 nemotron_h qwen3_5_moe_hub; do
  fx=tests/fixtures/$f
  for sw in 1 0; do
    CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C logits --model $fx --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || { echo "$f fuse=$sw failed: $(tail -2 /tmp/l.log)"; }
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: fused = unfused (cmp)" || echo "logits --step $f: DIFFER"
done
ts "checks done"
wait $mk; ts "made"
for round in 1 2; do
  for sw in 1 0; do
    CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed "s/^/r$round q30 fuse=$sw: /"
  done
done
ts end
