#!/bin/bash
# 2026-12-06 (thirty-seventh session): the chat's turn-5 prefill attention (124 new rows after 1372
# cached keys, Qwen3-8B dims 12 layers bf16: ~44 us a layer on the H100, ~3 GFLOP, where its tiles'
# arithmetic is a few us). (1) the prefill call with each existing flash switch, alternating, 3
# rounds; (2) ncu's sections (speed of light, warp states, scheduler, memory, occupancy, the
# sampled stalls by SASS line) on one of the timed forward's attention launches (grid 8 x 8 x 4).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
BD=/tmp/cb; mkdir -p $BD
[ -d $BD/qwen3-8b-12l ] || timeout 200 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts made
M=$BD/qwen3-8b-12l
run() { env "$@" $C bench --model $M --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 5 2>&1 | grep -E "^reps" | sed "s/^/$* /"; }
for r in 1 2 3; do
  run X=default
  run CINFER_CUDA_FLASH_LDM=0
  run CINFER_CUDA_FLASH_BK=16
  run CINFER_CUDA_FLASH_BQ=128
  run CINFER_CUDA_FLASH_GQA=0
  run CINFER_CUDA_FLASH_SEGMIN=64
  run CINFER_CUDA_FLASH_SPLIT=0
done
ts "switches done"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# forwards: warm-up prompt, warm-up step, depth (1372 rows), timed prompt; the 124-row ones have grid (8, 8, 4)
timeout 200 $NCU --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section SourceCounters --section ComputeWorkloadAnalysis \
  -k regex:attn_flash_pipe --launch-count 40 --cache-control none --clock-control none \
  $C bench --model $M --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 > $O/ncu_attn.txt 2> $O/ncu.err
ts "ncu rc $?"; grep -E "Grid Size|Duration|Block Size|Registers|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit" $O/ncu_attn.txt | head -400
ts end
