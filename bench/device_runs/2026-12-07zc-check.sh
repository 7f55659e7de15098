#!/bin/bash
# 2026-12-07 (forty-eighth session), first call: (1) the check of 4fc888b (the forty-seventh session's
# routing ranks by up to 32 threads an expert and the one-atomic grid barrier, never run on a GPU in their
# committed form): the route / fused MoE ops, decode beside the three ops (CINFER_CUDA_MOE_FUSE=0);
# (2) mla_prepare (000016a: an MLA step's latent norm + ropes, absorbed queries and latent store in one
# launch): its ops (= the three ops bit for bit), `logits --step` of the DeepSeek fixtures cmp-identical with
# CINFER_CUDA_MLA_PREP=0, decode of DeepSeek-V2-Lite dims (+ q_lora 1024) 14 layers alternating 1 / 0;
# Both new forms are off by default until this has run (cuda_internal.h): the runs below name their switches.
# (3) the shared expert folded into moe_fused (1979067, CINFER_CUDA_MOE_SHARED): its ops against the CPU
# (test_cuda_ops "moe_norm_experts shared"), decode with it on / off; (4) the MoE / DeepSeek fixtures' parity
# with both on; (5) the per-step kernel tables of both shapes (bench/ncu_steps.py).
# The device time left was short (refused starts all session): the Qwen3-30B-A3B shape only with ZC_A3B=1, the
# ncu table only if the run is still early. Staging: `make gpu-stage` (move .gpuz/prof.so.xz aside: the carry is 64 MiB), carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
T0=$(date +%s)
left() { [ $(( $(date +%s) - T0 )) -lt "$1" ]; }   # still before second $1 of the run
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader; head -1 .gpu/MANIFEST
M=/tmp/a3b12 D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make2.log 2>&1 || echo "make-random ds failed: $(tail -1 $O/make2.log)"
  [ "${ZC_A3B:-0}" = 1 ] && { timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 || echo "make-random a3b failed: $(tail -1 $O/make.log)"; }; ts made ) &
OPS=(mla_prepare "moe_norm_experts shared" moe_route "cuda mla_rope" moe_norm_experts)
[ "${ZC_QUICK:-0}" = 1 ] && OPS=(mla_prepare "moe_norm_experts shared" moe_norm_experts)
for o in "${OPS[@]}"; do
  timeout 150 $T --only "$o" > $O/ops.log 2>&1
  echo "ops '$o' rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
done
toks=1,5,9,2,7,3,11,4,8,6,12,10
FXS="deepseek_v3 deepseek_v3_nolora deepseek_v3_fp8 deepseek_v32"; [ "${ZC_QUICK:-0}" = 1 ] && FXS="deepseek_v3 deepseek_v32"
for fx in $FXS; do
  [ -d tests/fixtures/$fx ] || { echo "no fixture $fx"; continue; }
  CINFER_CUDA_MLA_PREP=1 timeout 60 $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/new.f32 --step --device cuda 2>$O/lg1.err
  CINFER_CUDA_MLA_PREP=0 timeout 60 $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/old.f32 --step --device cuda 2>$O/lg0.err
  echo "step logits $fx prep 1 vs 0: $(cmp /tmp/new.f32 /tmp/old.f32 >/dev/null 2>&1 && echo identical || echo "DIFFER ($(tail -1 $O/lg1.err))")"
  rm -f /tmp/new.f32 /tmp/old.f32
done
PO='moe|deepseek|nemotron_h|qwen3_next'; [ "${ZC_QUICK:-0}" = 1 ] && PO='deepseek_v3|deepseek_v32$|nemotron_h|qwen3_moe$|qwen3_next$'
CINFER_CUDA_MLA_PREP=1 CINFER_CUDA_MOE_SHARED=1 PARITY_ONLY=$PO CINFER=$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity ($PO) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
left ${ZC_BENCH_BY:-400} || { ts "no time left for the decode"; exit 0; }
b() { env $1 timeout -k 5 40 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-90 | head -1; }
for r in $(seq 1 ${ZC_ROUNDS:-1}); do
  ES=("CINFER_CUDA_MLA_PREP=1 CINFER_CUDA_MOE_SHARED=1" "CINFER_CUDA_MLA_PREP=0 CINFER_CUDA_MOE_SHARED=1"
      "CINFER_CUDA_MLA_PREP=1 CINFER_CUDA_MOE_SHARED=0" "CINFER_CUDA_MLA_PREP=0 CINFER_CUDA_MOE_SHARED=0")
  [ "${ZC_QUICK:-0}" = 1 ] && ES=("CINFER_CUDA_MLA_PREP=1 CINFER_CUDA_MOE_SHARED=1" "CINFER_CUDA_MLA_PREP=0 CINFER_CUDA_MOE_SHARED=0")
  for e in "${ES[@]}"; do
    echo "ds14 round $r $e: $(b "$e" $D)"; done
  [ "${ZC_A3B:-0}" = 1 ] && for e in CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE=0; do echo "a3b12 round $r $e: $(b $e $M)"; done
done
ts bench
for mm in $D; do
  left 330 || { ts "no time left for the ncu table of $mm"; continue; }
  for g in 1 5; do
    timeout 80 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $C bench --model $mm --device cuda --prompt-len 512 --gen $g > $O/ncu-$(basename $mm)-g$g.txt 2>&1
  done
  echo "per-step table, $mm after 512:"; python3 bench/ncu_steps.py $O/ncu-$(basename $mm)-g1.txt $O/ncu-$(basename $mm)-g5.txt 2>&1 | head -45
done
xz -9 $O/ncu-*.txt 2>/dev/null
ts end
