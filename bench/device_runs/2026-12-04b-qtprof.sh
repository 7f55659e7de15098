#!/bin/bash
# 2026-12-04 (twentieth session), second call: where the weight-streaming decode kernels stand after
# the eighteenth session's load changes, for the next step (cp.async staging or not). ncu detail of
# decode launches (launch-skip past the 16-token prompt) of the experts' gate+up / down and the fp8
# dense GEMV on V4-Flash dims 4 layers fp8-fp4, and of the experts' kernels on Qwen3-30B-A3B dims
# mlx4 (groups of 64); then the split attention's two kernels at depth 65536 (time only).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( nice -n 5 timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make-v4.log 2>&1 ) &
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 4 > $O/make-q30.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 150 python3 bench/make_q4_pair.py /tmp/q30 4 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1; rm -rf /tmp/q30 ) &
wait; ts "made: $(du -sh /tmp/v4 /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ') $(tail -1 $O/make-q4.log)"
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats"
for k in "v4 qt_gu_kernel 9 2" "v4 qt_dn_kernel 9 2" "v4 qt_dense_kernel 150 3" "q30pair/mlx4 qt_gu_kernel 9 2" "q30pair/mlx4 qt_dn_kernel 9 2"; do set -- $k
  timeout 100 $NCU --kernel-name regex:$2 --launch-skip $3 --launch-count $4 $S \
    $C bench --model /tmp/$1 --device cuda --prompt-len 16 --gen 12 > $O/ncu-${1%%/*}-$2.txt 2>&1; ts "ncu $1 $2 rc $?"
done
timeout 150 $NCU --graph-profiling node -k regex:'v4_attend_split|v4_attend_comb' --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --print-summary per-kernel $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen 3 --depth 65536 > $O/ncu-attn65k.txt 2>&1
ts "ncu attn rc $?"; grep -A3 "v4_attend" $O/ncu-attn65k.txt | grep -E "v4_attend|duration" | head -8
ts end
