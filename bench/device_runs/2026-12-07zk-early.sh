#!/bin/bash
# 2026-12-07 (fiftieth session): moe_fused with a shared expert, its gate / up units between a block's arrival at
# the first grid barrier and its wait (SHM + 4, CINFER_CUDA_MF_EARLY=1; the same bits): test_cuda_ops
# moe_norm_experts shared, `logits --step` cmp on / off of the shared-expert fixtures, decode on / off on ds14, q35,
# nem12 (X 2688: its early form spills 32-48 bytes at four warps a router row). Staging: `make gpu-stage`, carry
# [".gpuz"]; ~4 min (the session's last device time).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 N=/tmp/nem12 Q3=/tmp/q35
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $Q3 ] || timeout 240 $C make-random --config bench/qwen3.5-35b-a3b.config.json --out $Q3 --dtype bf16 --seed 1 --layers 8 > $O/make2.log 2>&1
  [ -d $N ] || timeout 240 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out $N --dtype bf16 --seed 1 --layers 12 > $O/make3.log 2>&1
  ts made ) &
CINFER_CUDA_MF_EARLY=1 timeout 50 $T --only "moe_norm_experts shared" > $O/ops.log 2>&1
echo "ops moe_norm_experts shared EARLY=1 rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
toks=1,5,9,2,7,3,11,4,8,6,12,10
for fx in deepseek_v3 nemotron_h qwen3_next qwen3_5_moe_hub; do
  CINFER_CUDA_MF_EARLY=1 timeout 30 $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/new.f32 --step --device cuda 2>$O/lg1.err
  CINFER_CUDA_MF_EARLY=0 timeout 30 $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/old.f32 --step --device cuda 2>$O/lg0.err
  echo "step logits $fx EARLY 1 vs 0: $(cmp /tmp/new.f32 /tmp/old.f32 >/dev/null 2>&1 && echo identical || echo "DIFFER ($(tail -1 $O/lg1.err))")"
  rm -f /tmp/new.f32 /tmp/old.f32
done
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { env $1 timeout -k 5 40 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do for mm in $D $Q3 $N; do for e in 1 0; do echo "$(basename $mm) r$r EARLY=$e: $(b CINFER_CUDA_MF_EARLY=$e $mm)"; done; done; done
ts end
