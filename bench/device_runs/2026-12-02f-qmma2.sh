#!/bin/bash
# (bench/RESULTS.md, eleventh session, 2026-12-02: one device call from the repository root with
# .gpuz carried.) The tensor-core 4-bit GEMVs with the RMSNorm staged in (norm_matmul_n /
# norm_matmul_swiglu in one launch), and two knobs: CINFER_CUDA_QMMA_U (bytes per batch of the
# one-matrix dense kernels) and CINFER_CUDA_QMMA_DNW (warps of the experts' down blocks): op tests
# on each, memcheck, parity of the mlx fixtures, mlx4 Qwen3-30B-A3B dims decode alternating, ncu.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
for v in "" "CINFER_CUDA_QMMA_U=2 CINFER_CUDA_QMMA_DNW=16" "CINFER_CUDA_NORM_FUSE=0"; do for o in "cuda q" "moe_experts q"; do
  env $v timeout 90 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' [$v]: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -4
done; done
timeout 60 $T --only "a4b" > $O/ops-a4b.log 2>&1; ts "a4b: $(tail -1 $O/ops-a4b.log)"
timeout 90 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "a4b" > /tmp/m.log 2>&1; ts "memcheck a4b rc $?: $(grep -E 'ERROR SUMMARY' /tmp/m.log | tr '\n' ' ')"; grep -B2 -A8 "Invalid\|Error" /tmp/m.log | head -30
PARITY_ONLY='^mlx_' CINFER=$PWD/$C timeout 100 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity mlx: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -5
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
M=/tmp/q30pair/mlx4
for r in 1 2; do for v in "CINFER_CUDA_QMMA=1" "CINFER_CUDA_NORM_FUSE=0" "CINFER_CUDA_QMMA_U=2" "CINFER_CUDA_QMMA_DNW=16" "CINFER_CUDA_QMMA_U=2 CINFER_CUDA_QMMA_DNW=16" "CINFER_CUDA_QMMA=0"; do
  ts "mlx4 r$r [$v]: $(env $v timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model $M --device cuda --prompt-len 8 --gen 3 > $O/ncu-decode.txt 2>&1; ts "ncu rc $?"
ts end
