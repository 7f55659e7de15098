#!/bin/bash
# 2026-12-06 (thirty-ninth session), third call: the one-launch MoE decode (moe_fused.cu) after
# call l measured it 7% slower with 16 warps a block (the whole register file: nothing of the
# kernels before / after could sit beside it, so PDL's overlap was lost at both ends). Now x staged
# once (every load first), the norm weight and the experts' table read before pdl_enter, the
# logits read once, 8 or 16 warps a block (CINFER_CUDA_MOE_FUSE_WARPS); call n: xn / h read from shared memory by 16-byte loads without bank conflicts (sh_row; the per-float loads were 8-way conflicts). (1) ops fused = three
# ops and against the CPU; (2) logits --step cmp; (3) decode tok/s: three ops / 8 warps / 16 warps,
# alternating, two rounds, Qwen3-30B-A3B dims 12 layers and DeepSeek-V2-Lite dims 14 layers, bf16.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1;
 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds --dtype bf16 --seed 1 --layers 14 > $O/makeds.log 2>&1) &
mk=$!
for sw in "CINFER_CUDA_MOE_FUSE=1" "CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_WARPS=16"; do
  q=--quick
  env $sw timeout 120 $T $q --only moe_norm_experts > $O/opsf.log 2>&1; rc=$?
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
    for sw in "CINFER_CUDA_MOE_FUSE=0" "CINFER_CUDA_MOE_FUSE=1" "CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE_WARPS=16"; do
      env $sw timeout 60 $C bench --model /tmp/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/r$round $m [$sw]: /"
    done
  done
done
ts end
