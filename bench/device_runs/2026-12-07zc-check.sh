#!/bin/bash
# 2026-12-07 (forty-eighth session), first call: the check of 4fc888b (the forty-seventh session's routing
# ranks by up to 32 threads an expert and the one-atomic grid barrier, never run on a GPU in their committed
# form): the route / fused MoE ops, the MoE fixtures' parity, decode beside the three ops
# (CINFER_CUDA_MOE_FUSE=0) on Qwen3-30B-A3B dims 12 layers and DeepSeek-V2-Lite dims (+ q_lora 1024) 14
# layers, then the per-step kernel tables of both (bench/ncu_steps.py) to see what is left
# outside moe_fused. Staging: `make gpu-stage`, carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader; head -1 .gpu/MANIFEST
M=/tmp/a3b12 D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 || echo "make-random a3b failed: $(tail -1 $O/make.log)"
  timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make2.log 2>&1 || echo "make-random ds failed: $(tail -1 $O/make2.log)"; ts made ) &
timeout 30 $T --only moe_route > $O/ops0.log 2>&1
echo "ops moe_route rc=$?: $(grep passed $O/ops0.log | tail -1)"; grep ^FAIL $O/ops0.log | head -3
timeout 150 $T --only moe_norm_experts > $O/ops1.log 2>&1
echo "ops moe_norm_experts rc=$?: $(grep passed $O/ops1.log | tail -1)"; grep ^FAIL $O/ops1.log | head -3
PARITY_ONLY='moe|deepseek_v3$|deepseek_v32$|deepseek_v3_fp8' CINFER=$C timeout 100 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity (MoE fixtures) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { env $1 timeout -k 5 40 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-90 | head -1; }
for r in 1 2; do for e in CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE=0; do
  echo "a3b12 round $r $e: $(b $e $M)"; done; done
for e in CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE=0; do echo "ds14 $e: $(b $e $D)"; done
ts bench
for mm in $M $D; do
  for g in 1 5; do
    timeout 100 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $C bench --model $mm --device cuda --prompt-len 512 --gen $g > $O/ncu-$(basename $mm)-g$g.txt 2>&1
  done
  echo "per-step table, $mm after 512:"; python3 bench/ncu_steps.py $O/ncu-$(basename $mm)-g1.txt $O/ncu-$(basename $mm)-g5.txt 2>&1 | head -45
done
xz -9 $O/ncu-*.txt
ts end
