#!/bin/bash
# Fifty-seventh session (2026-12-08; NOT RUN: that session was lent no device): moe_fused_qt.cu, an fp8
# MoE layer (router, routing, routed and shared experts) in one launch meant to give the composed ops'
# bits, off by default (CB_MOE_FUSE_QT 0) until this has run. The moe_norm_experts op cases first, then
# ds14f (fp8) decode after 512 with it on / off (CINFER_CUDA_MOE_FUSE_QT), two rounds alternating, bf16
# ds14 beside; `logits --step` of deepseek_v3_fp8 / deepseek_v4_fp8 on / off compared; GPU parity of the
# DeepSeek / Qwen3-MoE / MLX fixtures; ncu's per-step table of ds14f with it on (all of test_cuda_ops: a
# second call). Carry [".gpuz"] (make gpu-stage).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1 CINFER_CUDA_MOE_FUSE_QT=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d /tmp/ds14 ] || timeout 240 $C make-random --config /tmp/ds.json --out /tmp/ds14 --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d /tmp/ds14f ] || timeout 240 $C make-random --config /tmp/ds.json --out /tmp/ds14f --dtype fp8 --seed 1 --layers 14 > $O/make2.log 2>&1 ) &
timeout 120 $T --only moe_norm_experts > $O/ops-moe.log 2>&1
echo "ops moe rc=$?: $(grep -c '^PASS' $O/ops-moe.log) PASS, $(grep -c '^FAIL' $O/ops-moe.log) FAIL"; grep -E '^FAIL' $O/ops-moe.log | cut -c1-240 | head -12
timeout 90 $SAN --tool memcheck $T --only "moe_norm_experts shared fp8/f32s E=16" > $O/memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -c '^PASS' $O/memcheck.log) PASS; $(grep -E 'ERROR SUMMARY' $O/memcheck.log | tail -1)"
ts ops-moe
wait %1 2>/dev/null
ts made
b() { timeout -k 5 60 env $1 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | sed 's/  */ /g' | cut -c1-52; }
for r in 1 2; do
  for sw in CINFER_CUDA_MOE_FUSE_QT=1 CINFER_CUDA_MOE_FUSE_QT=0; do echo "r$r ds14f [$sw]: $(b $sw /tmp/ds14f)"; done
  echo "r$r ds14: $(b X=1 /tmp/ds14)"
done
ts bench
for f in deepseek_v3_fp8 deepseek_v4_fp8; do
  for sw in 1 0; do
    CINFER_CUDA_MOE_FUSE_QT=$sw timeout 60 $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || echo "$f $sw failed: $(tail -2 /tmp/l.log)"
  done
  cmp /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: identical on / off" || echo "logits --step $f: DIFFER"
done
PARITY_ONLY='deepseek|qwen3_moe|mlx' CINFER=$C timeout 120 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "parity rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E '^FAIL' $O/parity.log | head -4
ts parity
ncu_steps /tmp/ds14f
# then, in a second call: all of test_cuda_ops (timeout 300 $T > $O/ops.log) with CINFER_CUDA_MOE_FUSE_QT=1
ts end
