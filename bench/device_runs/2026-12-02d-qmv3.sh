#!/bin/bash
# (bench/RESULTS.md, ninth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) 4-bit qmv kernels built for 6 or 8 blocks an SM (CINFER_CUDA_QMV_OCC: registers capped,
# some spilled) against the uncapped build: op tests and mlx4 decode, alternating.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
for v in "CINFER_CUDA_QMV_OCC=6" "CINFER_CUDA_QMV_OCC=8 CINFER_CUDA_QMV_R=1 CINFER_CUDA_QE_DN_R=1"; do
  for o in "cuda q" "moe_experts q"; do
    env $v timeout 90 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' [$v]: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
  done
done
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
M=/tmp/q30pair/mlx4
for r in 1 2; do
  for v in "CINFER_CUDA_QMV_OCC=0" "CINFER_CUDA_QMV_OCC=6" "CINFER_CUDA_QMV_OCC=8" "CINFER_CUDA_QMV_OCC=6 CINFER_CUDA_QMV_R=1 CINFER_CUDA_QE_DN_R=1" "CINFER_CUDA_QMV_OCC=8 CINFER_CUDA_QMV_R=1 CINFER_CUDA_QE_DN_R=1"; do
    ts "mlx4 r$r [$v]: $(env $v timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
  done
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for o in "cuda q" "moe_experts q"; do
  timeout 90 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "$o" > /tmp/m.log 2>&1; ts "memcheck '$o' rc $?: $(grep -E 'ERROR SUMMARY|passed' /tmp/m.log | tr '\n' ' ')"
done
PARITY_ONLY='^(mlx_|deepseek_v3_fp8|deepseek_v4_fp8)' CINFER=$PWD/$C timeout 100 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity mlx_* and fp8: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -5
ts end
