#!/bin/bash
# 2026-12-03 (eighteenth session), last call: the quantized tensor-core op tests after qt_a_nib
# (the nibble A fragment in one helper for the pair and single-group paths; no change of
# operations), with the pair loads on and off, and the deepseek_v4 / mlx fixtures' parity.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
for v in "" "CINFER_CUDA_QT_W1PAIR=0"; do for o in "moe_experts q" "cuda q" "matmul_groups"; do
  env $v timeout 100 $T --only "$o" > $O/o.log 2>&1; ts "ops '$o' [$v]: $(tail -1 $O/o.log)"; grep "^FAIL" $O/o.log | head -3
done; done
PARITY_ONLY='deepseek_v4|mlx' CINFER=$PWD/$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
ts end
