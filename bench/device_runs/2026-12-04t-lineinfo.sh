#!/bin/bash
# 2026-12-04 (twenty-second session), sixth call (the budget's last ~4.5 min): ncu's source-level
# view of two small quantized decode GEMVs, from `make gpu-stage-lineinfo` (quant_mma*, gemv, moe
# with -lineinfo): the layer-0 q/k/v (qt_dense_kernel<4, 2, 1, 1, 8>) and router
# (qt_dense_kernel<8, 4, 1, 1, 16>) of the Qwen3-30B-A3B dims mlx4 model, 4 layers.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
C=.gpu/cinfer O=${OUT:-/tmp/out}; mkdir -p $O
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
timeout 60 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1
MAKE_Q4_JOBS=16 timeout 40 python3 bench/make_q4_pair.py /tmp/q30 4 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1; ts made
timeout 90 $NCU --kernel-name-base demangled --kernel-name 'regex:qt_dense_kernel<(8, 4, 1, 1, 16|4, 2, 1, 1, 8)>' --launch-count 3 \
  --clock-control none --import-source yes --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats \
  $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen 4 > $O/ncu-src.txt 2>&1; ts "ncu rc $?"
grep -E "qt_dense_kernel|Duration|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per" $O/ncu-src.txt | head -20
ts end
