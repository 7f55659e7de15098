#!/bin/bash
# Fifty-sixth session (2026-12-07; as run at 23:49 UTC its bench lines came out empty: b() put --model
# before `bench`, fixed here; the ops run stopped at its 150 s limit after 1555 PASS, 0 FAIL; the decode
# rows of RESULTS came from two short calls after it, the commands there; GEMV_SMALL measured level
# there and dropped from the code): fp8 dense launches at one 128-column group a warp (qt_ks's mg,
# CINFER_CUDA_QT_FP8G1) and one-token GEMVs of <= 512 rows one row a warp (the fp8 layers' router,
# CINFER_CUDA_GEMV_SMALL): ops (all of test_cuda_ops), GPU parity, then ds14f (fp8) decode after 512
# with both on / each off, two rounds alternating, bf16 ds14 beside; then ncu's per-step table
# with both on. Carry [".gpuz"] (make gpu-stage).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d /tmp/ds14 ] || timeout 240 $C make-random --config /tmp/ds.json --out /tmp/ds14 --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d /tmp/ds14f ] || timeout 240 $C make-random --config /tmp/ds.json --out /tmp/ds14f --dtype fp8 --seed 1 --layers 14 > $O/make2.log 2>&1 ) &
timeout 300 $T > $O/ops.log 2>&1
echo "ops rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep -E '^FAIL' $O/ops.log | cut -c1-200 | head -6
ts ops
CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "parity rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E '^FAIL' $O/parity.log | head -4
ts parity
wait %1 2>/dev/null
ts made
b() { timeout -k 5 60 env $1 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | sed 's/  */ /g' | cut -c1-52; }
for r in 1 2; do
  for sw in X=1 CINFER_CUDA_QT_FP8G1=0 CINFER_CUDA_GEMV_SMALL=0; do echo "r$r ds14f [$sw]: $(b $sw /tmp/ds14f)"; done
  echo "r$r ds14: $(b X=1 /tmp/ds14)"
done
ts bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for g in 1 5; do
  timeout 100 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/ds14f --device cuda --prompt-len 512 --gen $g > $O/ncu-ds14f-g$g.txt 2>&1
done
python3 bench/ncu_steps.py $O/ncu-ds14f-g1.txt $O/ncu-ds14f-g5.txt 2>&1 | head -24
xz -9 $O/ncu-*.txt 2>/dev/null
ts end
