#!/bin/bash
# 2026-12-06 (thirty-ninth session), fourth call: the one-launch MoE decode (moe_fused.cu, 16 warps
# a block, conflict-free shared reads: call n measured it +1..2% over the three ops). Now its warps
# ask L2 for their next gate / up rows and their down rows before the barrier (CINFER_CUDA_MOE_FUSE_PF).
# (1) ops quick, logits --step cmp; (2) decode tok/s three ops / fused with / without the L2 asks,
# alternating, two rounds, q30 12 layers and V2-Lite dims 14 layers bf16, q30 after 4096; (3) ncu
# durations and DRAM bytes of one fused launch each way and of the three MoE kernels it replaces.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1;
 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds --dtype bf16 --seed 1 --layers 14 > $O/makeds.log 2>&1) &
mk=$!
for sw in "CINFER_CUDA_MOE_FUSE=1" "CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_PF=0"; do
  env $sw timeout 120 $T --quick --only moe_norm_experts > $O/opsf.log 2>&1; rc=$?
  echo "ops moe_norm_experts [$sw] rc=$rc: $(grep -E 'passed|failed' $O/opsf.log | tail -1)"
  [ $rc = 0 ] || grep -iE "fail" $O/opsf.log | head -8
done
for f in qwen3_moe deepseek_v3 nemotron_h; do
  fx=tests/fixtures/$f
  for sw in 1 0; do
    CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C logits --model $fx --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || { echo "$f fuse=$sw failed: $(tail -2 /tmp/l.log)"; }
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: fused = unfused (cmp)" || echo "logits --step $f: DIFFER"
done
ts "checks done"
wait $mk; ts "made: $(du -sh /tmp/q30 /tmp/ds 2>&1 | cut -f1 | tr '\n' ' ')"
for round in 1 2; do
  for m in q30 ds; do
    for sw in "CINFER_CUDA_MOE_FUSE=0" "CINFER_CUDA_MOE_FUSE=1" "CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_PF=0"; do
      env $sw timeout 60 $C bench --model /tmp/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/r$round $m [$sw]: /"
    done
  done
done
for sw in 0 1; do
  CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 128 --depth 3968 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/q30@4k fuse=$sw: /"
done
ts "bench done"
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
for sw in "CINFER_CUDA_MOE_FUSE_PF=1" "CINFER_CUDA_MOE_FUSE_PF=0"; do
  env CINFER_CUDA_MOE_FUSE=1 $sw timeout 90 $NCU --kernel-name regex:moe_fused --launch-skip 24 --launch-count 2 --clock-control none $M \
    $C bench --model /tmp/q30 --device cuda --prompt-len 16 --gen 4 > $O/ncu.log 2>&1
  echo "ncu fused [$sw]:"; grep -E "moe_fused|duration|dram__" $O/ncu.log | sed 's/  */ /g' | cut -c1-150
done
CINFER_CUDA_MOE_FUSE=0 timeout 90 $NCU --kernel-name regex:"route_kernel|gate_up_kernel|down_kernel" --launch-skip 72 --launch-count 6 --clock-control none $M \
    $C bench --model /tmp/q30 --device cuda --prompt-len 16 --gen 4 > $O/ncu0.log 2>&1
echo "ncu three ops:"; grep -E "route_kernel|gate_up|down_kernel|duration|dram__" $O/ncu0.log | sed 's/  */ /g' | cut -c1-150
ts end
