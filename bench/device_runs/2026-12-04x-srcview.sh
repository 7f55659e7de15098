#!/bin/bash
# 2026-12-04 (twenty-third session), fourth call (the budget's last minutes): ncu's per-line source
# view (`--page source --print-source cuda`, from `make gpu-stage-lineinfo`) of the param-window
# quantized GEMVs on a Qwen3-30B-A3B dims mlx4 model, 4 layers: an o_proj
# (qt_dense_kernel<4, 2, 1, 1, 16>) and the head (qt_dense_kernel<4, 2, 1, 1, 8>, 9,496 tiles, which
# the window made slower: 84 -> 95 us), window on, then the head with CINFER_CUDA_QT_PV=0.
# Outcome (second run, 16:05 UTC, the regex fixed): each CSV held quant_mma.cu's source text alone,
# "Line No","Source", no metric columns and not quant_mma.cuh, where the kernels' loops live; ncu's
# live `--page source` printed no per-line counters here. Next time: `ncu -o rep ...` on the device,
# then `ncu -i rep.ncu-rep --page source --csv --print-source cuda` (or bring the report back).
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
C=.gpu/cinfer O=${OUT:-/tmp/out}; mkdir -p $O
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
timeout 60 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1
MAKE_Q4_JOBS=16 timeout 40 python3 bench/make_q4_pair.py /tmp/q30 4 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1; ts made
src() {   # NAME REGEX SKIP [env...]: one launch's source view, the lines with samples kept
  local name=$1 re=$2 skip=$3; shift 3
  env "$@" timeout 80 $NCU --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip $skip --launch-count 1 \
    --clock-control none --import-source yes --section SourceCounters --section WarpStateStats \
    --page source --print-source cuda --csv $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen 4 \
    > $O/src-$name.csv 2> $O/src-$name.err
  ts "ncu $name rc $? $(wc -l < $O/src-$name.csv) lines"
}
src oproj 'qt_dense_kernel<.int.4, .int.2, .int.1, .int.1, .int.16>' 4
src head 'qt_dense_kernel<.int.4, .int.2, .int.1, .int.1, .int.8>' 0 CINFER_CUDA_QT_PV=1
src head-pv0 'qt_dense_kernel<.int.4, .int.2, .int.1, .int.1, .int.8>' 0 CINFER_CUDA_QT_PV=0
for f in $O/src-*.csv; do head -c 300 $f | head -3; done
gzip $O/src-*.csv
ts end
