# 2026-12-03 (seventeenth session): the whole GPU suite on main as the sixteenth session left it
# (123090a: it ran only the V4 / mlx subsets), then V4-Flash dims 4 layers (fp8 + FP4) decode
# after 512 and the ncu kernel lists of a run with 1 and 5 generated tokens (graph nodes one at a
# time), to see where a decode step goes after the sixteenth session's fixes.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( nice -n 5 timeout 300 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
OUT=$O/suite timeout 330 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -14 $O/suite.txt
wait; ts "made v4: $(du -sh /tmp/v4 | cut -f1)"
for r in 1 2; do timeout 60 $C bench --model /tmp/v4 --device cuda --prompt-len 512 --gen 64 > $O/v4-bench$r.log 2>&1; ts "v4 r$r: $(grep -E '^decode' $O/v4-bench$r.log | sed 's/  */ /g' | tr '\n' '|')"; done
for g in 1 5; do
  timeout 100 $NCU --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen $g > $O/ncu-v4-g$g.txt 2>&1
  ts "ncu g$g rc $?"
done
ts end
