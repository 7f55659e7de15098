#!/bin/bash
# 2026-12-04 (twenty-first session), fourth call: what limits the pipelined prefill attention
# (attn_flash_pipe_kernel<128>) at 344 rows after 1920 cached keys (Qwen3-8B dims, 12 layers bf16):
# ncu sections of the first timed-prefill launch (launches 1-12: warm-up, 13-24: the depth's
# 1920-row prefill), split on and off; then the chat TTFT breakdown of 2026-12-04e on the new kernels.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts made
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for sp in 1 0; do
  CINFER_CUDA_FLASH_SPLIT=$sp timeout 150 $NCU --kernel-name regex:attn_flash_pipe --launch-skip 24 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section ComputeWorkloadAnalysis --section LaunchStats \
    $C bench --model /tmp/q8 --device cuda --prompt-len 344 --depth 1920 --gen 1 --no-graphs > $O/ncu-split$sp.txt 2>&1
  ts "ncu split=$sp rc=$? $(grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput' $O/ncu-split$sp.txt | tr -s ' ' | tr '\n' ';')"
done
ts ttft
timeout 200 bash bench/device_runs/2026-12-04e-ttft.sh > $O/ttft.log 2>&1
grep TURN $O/ttft.log
ts end
