#!/bin/bash
# (ran on the code of 022ee9b, the row copy since reverted; CINFER_CUDA_QT_RAW existed there)
# 2026-12-06 (fortieth session), third call: is a quantized GEMV's fixed cost instruction fetch?
# (its kernels are 20-64 KB of SASS, run once each per layer). ncu's warp-state section (stall
# reasons per issued instruction) of the decode launches of Qwen3-30B-A3B dims mlx4 (2 layers:
# make-random --seed 1 --layers 2, bench/make_q4_pair.py), CINFER_CUDA_QT_RAW 0 and 1.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 2 > $O/make.log 2>&1
MAKE_Q4_JOBS=8 timeout 100 python3 bench/make_q4_pair.py /tmp/q30 2 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
ts made
for sw in 0 1; do
  CINFER_CUDA_QT_RAW=$sw timeout 150 $NCU --graph-profiling node --clock-control none --kernel-name regex:'qt_' --launch-skip 12 --launch-count 10 \
    --metrics 'gpu__time_duration.sum,smsp__inst_executed.sum,smsp__warps_issue_stalled_no_instruction.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio' \
    $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen 4 > $O/ncu-raw$sw.txt 2>&1
  ts "raw=$sw rc $?"
  python3 - "$O/ncu-raw$sw.txt" <<'PY'
import re, sys
for l in open(sys.argv[1]):
    if re.match(r'\s+qt_\w+', l) and '(' in l:
        print('==', re.sub(r'\s+', ' ', l.strip())[:90]); continue
    m = re.match(r'\s+(\S+)\s+(\S+\s+)?([\d.,]+)\s*$', l)
    if m:
        name, unit, v = m.group(1), (m.group(2) or '').strip(), float(m.group(3).replace(',', ''))
        if 'stalled' in name and 'ratio' in name and v < 0.05: continue
        print('   %-75s %s %s' % (name.replace('smsp__average_warps_issue_stalled_', 'stall ').replace('_per_issue_active.ratio', ''), unit, m.group(3)))
PY
done 2>&1 | head -230
ts end
