#!/bin/bash
# 2026-12-06 (thirty-ninth session), first call: a MoE block's routed part of one token row in one
# launch (moe_fused.cu, backend.h moe_norm_experts, CINFER_CUDA_MOE_FUSE). (1) ops: moe_norm_experts
# fused = the three ops bit for bit and against the CPU, default switches and PDL off; moe_route /
# moe_experts unchanged; (2) `cinfer logits --step` of the MoE fixtures fused against not (cmp: the
# same bits expected); memcheck of a fused logits --step; (3) decode tok/s fused against not (one
# binary, alternating, two rounds): Qwen3-30B-A3B dims 12 layers bf16, DeepSeek-V2-Lite dims 14 layers
# bf16; q30 after 4096.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 150 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1;
 timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds --dtype bf16 --seed 1 --layers 14 > $O/makeds.log 2>&1) &
mk=$!
for sw in X=default CINFER_CUDA_PDL=0; do
  env $sw timeout 120 $T --only moe_norm_experts > $O/opsf.log 2>&1; rc=$?
  echo "ops moe_norm_experts [$sw] rc=$rc: $(grep -E 'passed|failed' $O/opsf.log | tail -1)"
  [ $rc = 0 ] || grep -iE "fail" $O/opsf.log | head -12
done
timeout 120 $T --only 'moe_' > $O/opsm.log 2>&1; echo "ops moe_ rc=$?: $(grep -E 'passed|failed' $O/opsm.log | tail -1)"
grep -iE "fail" $O/opsm.log | head -5
for f in qwen3_moe qwen3_moe_norenorm deepseek_v3 deepseek_v32 deepseek_v3_nolora lfm2_moe qwen3_5_moe_hub nemotron_h deepseek_v4; do
  fx=tests/fixtures/$f
  for sw in 1 0; do
    CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C logits --model $fx --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || { echo "$f fuse=$sw failed: $(tail -2 /tmp/l.log)"; }
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: fused = unfused (cmp)" || echo "logits --step $f: DIFFER ($(ls -la /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 2>&1 | awk '{print $5}' | tr '\n' ' '))"
done
timeout 150 $SAN --tool memcheck --error-exitcode 99 --print-limit 20 $C logits --model tests/fixtures/qwen3_moe --tokens 1,5,9,22,7,3,11,40 --out /tmp/mc.f32 --step --device cuda > $O/memcheck.log 2>&1; echo "memcheck fused logits --step rc=$? $(grep -c 'ERROR SUMMARY: 0' $O/memcheck.log)"
ts "checks done"
wait $mk; ts "made: $(du -sh /tmp/q30 /tmp/ds 2>&1 | cut -f1 | tr '\n' ' ')"
for round in 1 2; do
  for m in q30 ds; do
    for sw in 1 0; do
      CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C bench --model /tmp/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed "s/^/r$round $m fuse=$sw: /"
    done
  done
done
ts "bench done"
for sw in 1 0; do
  CINFER_CUDA_MOE_FUSE=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 128 --depth 3968 --gen 128 2>&1 | grep -E "^decode" | sed "s/^/q30@4k fuse=$sw: /"
done
ts end
