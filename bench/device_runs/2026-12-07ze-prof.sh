#!/bin/bash
# 2026-12-07 (fiftieth session): after call zd (moe_fused's SH form +3.6..4.2% over the three ops on
# Qwen3-30B-A3B dims; the shared-expert fold +3..4% on Qwen3.5-35B-A3B dims, -6% on DeepSeek-V2-Lite dims),
# with CB_MOE_SHARED 2 (σ-gated shared experts folded by default) and the MF_GENERIC switch gone: (1) the
# gated / Nemotron-H / DeepSeek fixtures' GPU parity on the defaults; (2) the fold 1 / 0 on Nemotron-3-Nano
# dims 12 layers (relu², SI 3712 = 2 I, ungated: off by default now, unmeasured); (3) the per-step kernel
# tables (bench/ncu_steps.py) of DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16, after 512 — where
# #16's 598 tok/s (H100) goes against its ~900. Staging: `make gpu-stage`, carry [".gpuz"]; ~6 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 N=/tmp/nem12
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $N ] || timeout 240 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out $N --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  ts made ) &
PO='qwen3_next|qwen3_5_moe|nemotron_h|deepseek_v3$'
PARITY_ONLY=$PO CINFER=$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity ($PO) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { env $1 timeout -k 5 60 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do
  for e in CINFER_CUDA_MOE_SHARED=1 CINFER_CUDA_MOE_SHARED=0; do echo "nem12 r$r $e: $(b $e $N)"; done
done
echo "ds14 default: $(b X=1 $D)"
ts bench
for mm in $D ${ZE_NEM_TABLE:+$N}; do
  for g in 1 5; do
    timeout 100 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $C bench --model $mm --device cuda --prompt-len 512 --gen $g > $O/ncu-$(basename $mm)-g$g.txt 2>&1
  done
  echo "per-step table, $mm after 512:"; python3 bench/ncu_steps.py $O/ncu-$(basename $mm)-g1.txt $O/ncu-$(basename $mm)-g5.txt 2>&1 | head -50
done
xz -9 $O/ncu-*.txt 2>/dev/null
ts end
