#!/bin/bash
# (bench/RESULTS.md, ninth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) qmv with two chunks in flight per lane (CINFER_CUDA_QMV_TWO) against one, its op tests,
# and an ncu kernel-time profile (one metric, so one pass a kernel) of mlx4 decode steps.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
O=${OUT:-/tmp/out}; mkdir -p $O
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
for v in "CINFER_CUDA_QMV_TWO=1" "CINFER_CUDA_QMV_TWO=1 CINFER_CUDA_QMV_R=1 CINFER_CUDA_QE_GU_R=1 CINFER_CUDA_QE_DN_R=1"; do
  for o in "cuda q" "moe_experts q"; do
    env $v timeout 90 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' [$v]: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
  done
done
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
M=/tmp/q30pair/mlx4
for r in 1 2; do
  for v in "CINFER_CUDA_QMV_TWO=0" "CINFER_CUDA_QMV_TWO=1" "CINFER_CUDA_QMV_TWO=1 CINFER_CUDA_QMV_R=1" "CINFER_CUDA_QMV_TWO=1 CINFER_CUDA_QE_DN_R=1"; do
    ts "mlx4 r$r [$v]: $(env $v timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
  done
done
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model $M --device cuda --prompt-len 8 --gen 3 > $O/ncu-decode.txt 2>&1; ts "ncu rc $?"
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model /tmp/q30 --device cuda --prompt-len 8 --gen 3 > $O/ncu-decode-bf16.txt 2>&1; ts "ncu bf16 rc $?"
ts end
