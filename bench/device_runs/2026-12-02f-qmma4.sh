#!/bin/bash
# (bench/RESULTS.md, eleventh session, 2026-12-02: one device call from the repository root with
# .gpuz carried.) The tensor-core GEMVs for 8-bit MLX affine codes too (the 4-bit checkpoint's
# routers; an 8-bit checkpoint of the same weights): op tests both ways, memcheck, parity of the
# mlx fixtures, then Qwen3-30B-A3B dims (12 layers) decode mlx4 / mlx8 / bf16 alternating.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
for v in 1 0; do for o in "cuda q" "moe_experts q"; do
  CINFER_CUDA_QMMA=$v timeout 100 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' QMMA=$v: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -4
done; done
timeout 60 $T --only "a8b" > $O/ops-a8b.log 2>&1; ts "a8b: $(tail -1 $O/ops-a8b.log)"
timeout 120 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "a8b" > /tmp/m.log 2>&1; ts "memcheck a8b rc $?: $(grep -E 'ERROR SUMMARY' /tmp/m.log | tr '\n' ' ')"; grep -B2 -A8 "Invalid\|Error" /tmp/m.log | head -30
PARITY_ONLY='^mlx_' CINFER=$PWD/$C timeout 100 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity mlx: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -5
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
MAKE_Q_BITS=8 MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
for r in 1 2; do for m in mlx4 mlx8; do for v in 1 0; do
  ts "$m r$r QMMA=$v: $(CINFER_CUDA_QMMA=$v timeout 60 $C bench --model /tmp/q30pair/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
  ts "bf16 r$r: $(timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done
ts "mlx4 batch 8: $(timeout 60 $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 64 --batch 8 2>&1 | grep -E "^decode batch" | sed 's/  */ /g' | tr '\n' ' ')"
ts "mlx4 pp512: $(timeout 60 $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 8 2>&1 | grep -E "^prefill" | sed 's/  */ /g' | tr '\n' ' ')"
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 8 --gen 3 > $O/ncu-decode.txt 2>&1; ts "ncu rc $?"
ts end
