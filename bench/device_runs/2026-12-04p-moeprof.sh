#!/bin/bash
# 2026-12-04 (twenty-second session), second call: where a Qwen3-30B-A3B dims decode step goes,
# bf16 and mlx4 (4 of 48 layers, make-random --seed 1, bench/make_q4_pair.py): decode tok/s, the
# per-step kernel table (bench/ncu_steps.py; this time --cache-control none --clock-control none,
# so the times are nearer a replayed step's), and ncu's detail of the experts' and dense decode
# launches of both forms.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1; ts "made bf16 rc $?"
MAKE_Q4_JOBS=8 timeout 150 python3 bench/make_q4_pair.py /tmp/q30 4 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1; ts "made mlx4 rc $? $(tail -1 $O/make-q4.log)"
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len 512 --gen 64 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
for r in 1 2; do ts "bf16 r$r: $(b /tmp/q30)"; ts "mlx4 r$r: $(b /tmp/q30pair/mlx4)"; done
for m in q30 q30pair/mlx4; do
  for g in 1 5; do
    timeout 120 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $C bench --model /tmp/$m --device cuda --prompt-len 16 --gen $g > $O/ncu-g$g.txt 2>&1
    ts "ncu $m g$g rc $?"
  done
  python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt > $O/steps-${m#*/}.txt 2>&1; head -30 $O/steps-${m#*/}.txt
done
for k in "q30pair/mlx4 qt_gu_kernel" "q30pair/mlx4 qt_dn_kernel" "q30pair/mlx4 qt_dense_kernel" "q30 gate_up_kernel" "q30 down_kernel"; do set -- $k
  timeout 100 $NCU --kernel-name regex:$2 --launch-skip 24 --launch-count 2 --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section LaunchStats --section Occupancy \
    $C bench --model /tmp/$1 --device cuda --prompt-len 16 --gen 12 > $O/ncu-$2.txt 2>&1; ts "ncu $2 rc $?"
done
ts end
