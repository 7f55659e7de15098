#!/bin/bash
# (bench/RESULTS.md, ninth session, 2026-12-02: one device call, run from the repository root on the
# device with .gpuz carried.) The qmv decode kernels and the vectorised widening: op tests on every
# row-count variant, parity of the quantized fixtures, then mlx4 Qwen3-30B-A3B dims (12 layers)
# alternating the kernel switches, and a DeepSeek V2-Lite-dims fp8 checkpoint (14 layers).
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
O=${OUT:-/tmp/out}; mkdir -p $O
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
for v in "" "CINFER_CUDA_QMV_R=2 CINFER_CUDA_QE_GU_R=1 CINFER_CUDA_QE_DN_R=1" "CINFER_CUDA_QE_GU_R=4 CINFER_CUDA_QE_DN_R=4" "CINFER_CUDA_QMV=0"; do
  for o in "cuda q" "moe_experts q"; do
    env $v timeout 90 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' [$v]: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
  done
done
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
M=/tmp/q30pair/mlx4
for r in 1 2; do
  for v in "CINFER_CUDA_QMV=1" "CINFER_CUDA_QMV=0" "CINFER_CUDA_QMV_R=2" "CINFER_CUDA_QE_GU_R=1" "CINFER_CUDA_QE_GU_R=4" "CINFER_CUDA_QE_DN_R=1" "CINFER_CUDA_QE_DN_R=4"; do
    ts "mlx4 r$r [$v]: $(env $v timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
  done
done
ts "bf16: $(timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
rm -rf /tmp/q30
timeout 200 $T > $O/ops.log 2>&1; ts "ops all: $(tail -1 $O/ops.log)"; grep "^FAIL" $O/ops.log | head -5
PARITY_ONLY='^(mlx_|deepseek_v3_fp8|deepseek_v4_fp8|deepseek_v3$|qwen3_moe)' CINFER=$PWD/$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity subset: $(grep -c '^PASS' $O/parity.log) PASS, $(grep -c '^FAIL' $O/parity.log) FAIL"; grep '^FAIL' $O/parity.log | head -5
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/dsq.json
$C make-random --config /tmp/dsq.json --out /tmp/dsfp8 --dtype fp8 --seed 1 --layers 14 > /dev/null && ts "made ds fp8"
for r in 1 2; do
  ts "ds fp8 r$r: $(timeout 60 $C bench --model /tmp/dsfp8 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done
ts end
