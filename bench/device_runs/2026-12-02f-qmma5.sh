#!/bin/bash
# (bench/RESULTS.md, eleventh session, 2026-12-02: one device call from the repository root with
# .gpuz carried.) Three knobs of the tensor-core GEMVs: CINFER_CUDA_QMMA_PRIME (two batches of
# codes in flight across the staging of x), CINFER_CUDA_QMMA_GMIN (fewest groups a warp keeps when
# a tile's groups are split: small matrices such as the router split further) and
# CINFER_CUDA_QMMA_GUKS (the experts' gate+up split): op tests on the extremes, then mlx4 / mlx8
# Qwen3-30B-A3B dims (12 layers) decode alternating. Of the three only GMIN's finding stayed (the
# rule in quant_mma.cu's qt_ks); the knobs themselves were removed after this run.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
for v in "" "CINFER_CUDA_QMMA_PRIME=0 CINFER_CUDA_QMMA_GMIN=1 CINFER_CUDA_QMMA_GUKS=8"; do for o in "cuda q" "moe_experts q"; do
  env $v timeout 100 $T --only "$o" > /tmp/o.log 2>&1; ts "ops '$o' [$v]: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -4
done; done
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
MAKE_Q_BITS=8 MAKE_Q4_JOBS=16 timeout 120 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
for r in 1 2; do for v in "CINFER_CUDA_QMMA_PRIME=0" "CINFER_CUDA_QMMA_PRIME=1" "CINFER_CUDA_QMMA_GMIN=2" "CINFER_CUDA_QMMA_GMIN=1" "CINFER_CUDA_QMMA_GUKS=8" "CINFER_CUDA_QMMA_GUKS=2"; do
  ts "mlx4 r$r [$v]: $(env $v timeout 60 $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-60)"
done
  ts "mlx8 r$r: $(timeout 60 $C bench --model /tmp/q30pair/mlx8 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-60)"
done
ts end
