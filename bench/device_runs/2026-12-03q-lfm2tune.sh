# 2026-12-03 (fifteenth session): LFM2-8B-A1B dims (8 layers, random bf16) decode with the CUDA
# tuning switches that touch its 2048-column GEMVs and experts, settings alternating, 3 rounds:
# default, CINFER_CUDA_GEMV1=1..6 (one kernel shape for the one-token GEMVs of <= 2048 columns,
# gemv.cu), CINFER_CUDA_NORM_FUSE=0, CINFER_CUDA_MOE_SPLIT=0, CINFER_CUDA_MOE_PIPE=0. Then the
# GEMV op cases with each GEMV1 shape against the CPU.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
timeout 100 $C make-random --config bench/lfm2-8b-a1b.config.json --out /tmp/lfm2 --dtype bf16 --seed 1 --layers 8 > /dev/null
b() { timeout 40 $C bench --model /tmp/lfm2 --device cuda --prompt-len 1024 --gen 256 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-60; }
for r in 1 2 3; do
  for s in default CINFER_CUDA_GEMV1=1 CINFER_CUDA_GEMV1=2 CINFER_CUDA_GEMV1=3 CINFER_CUDA_GEMV1=4 CINFER_CUDA_GEMV1=5 \
           CINFER_CUDA_GEMV1=6 CINFER_CUDA_NORM_FUSE=0 CINFER_CUDA_MOE_SPLIT=0 CINFER_CUDA_MOE_PIPE=0; do
    ts "r$r $s: $( [ $s = default ] || export "$s"; b )"
  done
done
for g in 1 2 3 4 5 6; do CINFER_CUDA_GEMV1=$g timeout 60 $T --only "cuda matmul" > $O/ops-g$g.log 2>&1
  ts "GEMV1=$g matmul ops: $(grep -c '^PASS' $O/ops-g$g.log) pass, $(grep -c '^FAIL' $O/ops-g$g.log) fail"; done
ts end
