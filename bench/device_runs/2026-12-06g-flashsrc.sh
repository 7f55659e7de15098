#!/bin/bash
# 2026-12-06 (thirty-eighth session), first call: (1) 2026-12-06f's rule check (the f16 prefill
# attention from 512 rows against it off at 512 / 1000 / 2048 fresh rows); (2) ncu's per-SASS-line
# stall samples of the chat's turn-5 attention launch (124 rows after 1372 keys, Qwen3-8B dims, the third
# layer of the timed call: launches 0-11 the warm-up prefill, 12-23 the depth) in both forms, from `make gpu-stage-lineinfo LINEINFO=attn_flash`, summarised by
# bench/ncu_src.py; (3) the turn-5 TTFT split (2026-12-06e-ttft.sh).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
SERVE_STEPS=make SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb CINFER=$C timeout 150 bash bench/serve_cuda.sh > $O/make.log 2>&1
ts "made: $(du -sh /tmp/sb/q8 2>&1 | cut -f1)"
M=/tmp/sb/q8
for shape in "--prompt-len 512 --depth 0" "--prompt-len 1000 --depth 0" "--prompt-len 2048 --depth 0"; do
  for e in X=default CINFER_CUDA_FLASH_H16=0; do
    env $e timeout 60 $C bench --model $M --device cuda $shape --gen 1 --reps 5 2>&1 | grep -E "^reps" | sed "s/^/$e $shape: /"
  done
done
ts "bench done"
for h in 3 0; do
  CINFER_CUDA_FLASH_H16=$h timeout 120 $NCU --kernel-name-base demangled --kernel-name regex:attn_flash_pipe_kernel \
    --launch-skip 26 --launch-count 1 --clock-control none --import-source yes \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    --section ComputeWorkloadAnalysis --section InstructionStats -o $O/flash-h$h \
    $C bench --model $M --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 > $O/ncu-h$h.log 2>&1
  ts "ncu h16=$h rc $?"
  $NCU -i $O/flash-h$h.ncu-rep --page details > $O/details-h$h.txt 2>&1
  $NCU -i $O/flash-h$h.ncu-rep --page source --print-source sass --csv > $O/src-h$h.csv 2>&1
  python3 bench/ncu_src.py $O/src-h$h.csv > $O/src-h$h.txt 2>&1
  head -70 $O/src-h$h.txt
  grep -E "Duration|Registers|Warp Cycles Per Issued|Issued Ipc|No Eligible|Achieved Occupancy|Executed Instructions  |Grid Size|Block Size" $O/details-h$h.txt | head -12
  gzip -f $O/src-h$h.csv
done
ls -la $O
ts "ncu done"
MODEL=$M timeout 100 bash bench/device_runs/2026-12-06e-ttft.sh
ts end
