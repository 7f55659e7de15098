#!/bin/bash
# 2026-12-03 (eighteenth session), first call: the tensor-core GEMVs' loads. Three changes against
# the lib of 8b72b50 (carried as .gpuz/before.so.xz, run with the same binary): fp8 / 8-bit g128
# codes read in whole sectors (qt_word), mxfp4 / 4-bit g32 code loads kept in L1 for the next
# group and mxfp4 scale pairs in one load, the experts' down split by the balance rule
# (CINFER_CUDA_QT_DNBAL=0: the old one). Ops tests + the deepseek_v4 / fp8 / mlx fixtures'
# parity, V4-Flash dims 4 layers fp8-fp4 and V3 dims fp8 5 layers decode alternating, then ncu's
# detail of decode launches of the three qt kernels.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/bef && cp .gpu/cinfer /tmp/bef/ && xz -dc .gpuz/before.so.xz > /tmp/bef/libcinfer_cuda.so
CB=/tmp/bef/cinfer
ts start
( timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make-v4.log 2>&1;
  timeout 200 $C make-random --config bench/deepseek-v3.config.json --out /tmp/v3 --dtype fp8 --seed 1 --layers 5 > $O/make-v3.log 2>&1 ) &
timeout 200 $T > $O/ops.log 2>&1; ts "ops rc $?: $(tail -1 $O/ops.log)"; grep "^FAIL" $O/ops.log | head -6
PARITY_ONLY='deepseek_v4|fp8|mlx' CINFER=$PWD/$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
wait; ts "made: $(du -sh /tmp/v4 /tmp/v3 | tr '\n' ' ')"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 64 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do
  ts "v4 r$r before: $(b $CB bench --model /tmp/v4)"
  ts "v4 r$r after:  $(b $C bench --model /tmp/v4)"
  ts "v4 r$r after DNBAL=0: $(CINFER_CUDA_QT_DNBAL=0 b $C bench --model /tmp/v4)"
  ts "v3 r$r before: $(b $CB bench --model /tmp/v3)"
  ts "v3 r$r after:  $(b $C bench --model /tmp/v3)"
done
# decode launches: 16-token prompt (its fp8 launches of <= 8 rows are the compressors'), then
# skip well into the decode steps
for k in "qt_gu_kernel 9 2" "qt_dn_kernel 9 2" "qt_dense_kernel 150 3"; do set -- $k
  timeout 100 $NCU --kernel-name regex:$1 --launch-skip $2 --launch-count $3 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section LaunchStats --section Occupancy --section SourceCounters \
    $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen 12 > $O/ncu-$1.txt 2>&1; ts "ncu $1 rc $?"
done
ts end
