#!/bin/bash
# 2026-12-06 (thirty-ninth session), fifth call: the one-launch MoE decode (moe_fused.cu). Call o:
# the L2 asks measured slower (now off), ncu: the fused launch 53-56 us for 76 MB (42% of DRAM
# peak) against route 7.3-8.5 + gate_up 24.5 (61.5%) + down 17.6-18.0 us (+ the router GEMV), so
# its streaming phases run slower than the standalone kernels at 16 warps an SM. Now 32 warps a
# block (64 registers, 4 loads a row in flight) as CINFER_CUDA_MOE_FUSE_WARPS=32. (1) ops quick and
# logits --step cmp with 32 warps; (2) decode tok/s three ops / 16 / 32 warps, alternating, two
# rounds, and after 4096; (3) the GPU suite's parity, memcheck-cli and serve with the fused launch on.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1;
 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds --dtype bf16 --seed 1 --layers 14 > $O/makeds.log 2>&1) &
mk=$!
CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_WARPS=32 timeout 120 $T --quick --only moe_norm_experts > $O/opsf.log 2>&1; rc=$?
echo "ops moe_norm_experts [32 warps] rc=$rc: $(grep -E 'passed|failed' $O/opsf.log | tail -1)"
[ $rc = 0 ] || grep -iE "fail" $O/opsf.log | head -8
for f in qwen3_moe deepseek_v3; do
  fx=tests/fixtures/$f
  for sw in 1 0; do
    CINFER_CUDA_MOE_FUSE=$sw CINFER_CUDA_MOE_FUSE_WARPS=32 timeout 60 $C logits --model $fx --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || { echo "$f fuse=$sw failed: $(tail -2 /tmp/l.log)"; }
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: fused (32 warps) = unfused (cmp)" || echo "logits --step $f: DIFFER"
done
ts "checks done"
wait $mk; ts "made: $(du -sh /tmp/q30 /tmp/ds 2>&1 | cut -f1 | tr '\n' ' ')"
for round in 1 2; do
  for m in q30 ds; do
    for sw in "CINFER_CUDA_MOE_FUSE=0" "CINFER_CUDA_MOE_FUSE=1" "CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_WARPS=32"; do
      env $sw timeout 60 $C bench --model /tmp/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/r$round $m [$sw]: /"
    done
  done
done
for sw in "CINFER_CUDA_MOE_FUSE=0" "CINFER_CUDA_MOE_FUSE=1" "CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_WARPS=32"; do
  env $sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 128 --depth 3968 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/q30@4k [$sw]: /"
done
ts "bench done"
rm -rf /tmp/q30 /tmp/ds
CINFER_CUDA_MOE_FUSE=1 GPU_STEPS="parity memcheck-cli serve" timeout 280 bash tests/gpu/run.sh 2>&1 | tail -22
ts end
