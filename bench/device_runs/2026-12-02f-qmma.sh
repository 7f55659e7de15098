#!/bin/bash
# (bench/RESULTS.md, eleventh session, 2026-12-02: one device call from the repository root with
# .gpuz carried.) The 4-bit tensor-core GEMVs (quant_mma.cu, CINFER_CUDA_QMMA) against the f32
# qmv kernels: op tests both ways, memcheck, parity of the mlx fixtures, then mlx4 Qwen3-30B-A3B
# dims (12 layers) decode alternating, and an ncu kernel-time list of a few decode steps.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
for v in 1 0; do for o in "cuda q" "moe_experts q"; do
  CINFER_CUDA_QMMA=$v timeout 90 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' QMMA=$v: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -4
done; done
CINFER_CUDA_QMMA=1 timeout 60 $T --only "a4b" > $O/ops-a4b.log 2>&1; ts "a4b: $(tail -1 $O/ops-a4b.log)"
timeout 90 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "a4b" > /tmp/m.log 2>&1; ts "memcheck a4b rc $?: $(grep -E 'ERROR SUMMARY' /tmp/m.log | tr '\n' ' ')"; grep -B2 -A8 "Invalid\|Error" /tmp/m.log | head -30
PARITY_ONLY='^mlx_' CINFER=$PWD/$C timeout 100 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity mlx: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -5
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
M=/tmp/q30pair/mlx4
for r in 1 2; do for v in 1 0; do
  ts "mlx4 r$r QMMA=$v: $(CINFER_CUDA_QMMA=$v timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
ts "mlx4 batch 8 QMMA=1: $(timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 64 --batch 8 2>&1 | grep -E "^decode" | sed 's/  */ /g' | tr '\n' ' ')"
ts "mlx4 batch 8 QMMA=0: $(CINFER_CUDA_QMMA=0 timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 64 --batch 8 2>&1 | grep -E "^decode" | sed 's/  */ /g' | tr '\n' ' ')"
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model $M --device cuda --prompt-len 8 --gen 3 > $O/ncu-decode.txt 2>&1; ts "ncu rc $?"
ts end
