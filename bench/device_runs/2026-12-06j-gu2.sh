#!/bin/bash
# 2026-12-06 (thirty-eighth session), fourth call: the routed experts' decode gate_up with both
# rows' loads a round together (moe.cu lane_dot2, CINFER_CUDA_MOE_GU2). (1) moe_experts ops
# against the CPU with the switch on and off; `cinfer logits --step` of the MoE fixtures on / off
# (cmp: the same bits expected); (2) decode tok/s on / off, one binary, alternating, two rounds:
# Qwen3-30B-A3B dims 12 layers bf16 at batch 1 and 8, and after 4096.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1 &
mk=$!
for sw in 1 0; do
  CINFER_CUDA_MOE_GU2=$sw timeout 100 $T --only "moe_experts" > $O/ops.log 2>&1; rc=$?
  echo "ops [GU2=$sw] [moe_experts] rc=$rc: $(grep -E 'passed|failed' $O/ops.log | tail -1)"
  [ $rc = 0 ] || grep -iE "fail" $O/ops.log | head -8
done
for f in qwen3_moe qwen3_moe_norenorm deepseek_v3 deepseek_v3_fp8 lfm2_moe qwen3_5_moe_hub; do
  for sw in 1 0; do
    CINFER_CUDA_MOE_GU2=$sw timeout 60 $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f GU2=$sw failed: $(tail -2 /tmp/l.log)"
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: on = off (cmp)" || echo "logits --step $f: DIFFER"
done
ts "checks done"
wait $mk; ts "made: $(du -sh /tmp/q30 2>&1 | cut -f1)"
for round in 1 2; do
  for sw in 1 0; do
    CINFER_CUDA_MOE_GU2=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/r$round GU2=$sw: /"
    CINFER_CUDA_MOE_GU2=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 64 --batch 8 2>&1 | grep -E "^decode batch" | sed "s/^/r$round GU2=$sw: /"
  done
done
for sw in 1 0; do
  CINFER_CUDA_MOE_GU2=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 128 --depth 3968 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/@4k GU2=$sw: /"
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for sw in 1 0; do
  CINFER_CUDA_MOE_GU2=$sw timeout 60 $NCU --kernel-name regex:gate_up_kernel --launch-skip 20 --launch-count 3 --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    $C bench --model /tmp/q30 --device cuda --prompt-len 16 --gen 8 --no-graphs 2>&1 | grep -E "gpu__time|dram__bytes|registers|warps_active" | sed "s/^/GU2=$sw /"
done
ts end
