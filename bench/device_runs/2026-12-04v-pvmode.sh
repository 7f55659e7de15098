#!/bin/bash
# 2026-12-04 (twenty-third session), second call: the param window by launch (CINFER_CUDA_QT_PV:
# 0 never, 1 every launch, 2 the default: experts' kernels and dense launches with ks > 1; the
# first call's every-launch form slowed the head, 84 -> 95 us). test_cuda_ops in each mode, the
# parity fixtures and memcheck on the default, then Qwen3-30B-A3B dims 12 layers mlx4 decode
# after 512 in the three modes alternating, and the per-step tables of modes 2 and 0.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1 CINFER=$PWD/$C
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( nice -n 5 timeout 300 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1 ) &
timeout 100 $T > $O/ops.txt 2>&1; ts "ops default rc $? $(tail -1 $O/ops.txt)"
for m in 0 1; do CINFER_CUDA_QT_PV=$m timeout 60 $T --quick > $O/ops$m.txt 2>&1; ts "ops --quick PV=$m rc $? $(tail -1 $O/ops$m.txt)"; done
timeout 100 $SAN --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 20 $T --quick > $O/memcheck.txt 2>&1; ts "memcheck rc $? $(tail -1 $O/memcheck.txt)"
timeout 240 bash tests/gpu/parity.sh > $O/parity.txt 2>&1; ts "parity rc $? $(grep -c PASS $O/parity.txt) PASS $(grep -c FAIL $O/parity.txt) FAIL"
wait; ts "made $(du -sh /tmp/q30 /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ')"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-50; }
for r in 1 2 3 4; do
  for m in 0 1 2; do ts "mlx4 PV=$m r$r: $(CINFER_CUDA_QT_PV=$m b $C bench --model /tmp/q30pair/mlx4)"; done
done
for m in 2 0; do
  for g in 1 5; do
    CINFER_CUDA_QT_PV=$m timeout 60 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen $g > $O/ncu-g$g.txt 2>&1
  done
  ts "per-step table, PV=$m"; python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt 2>&1 | head -8
done
rm -f $O/ncu-g*.txt
tail -30 $O/parity.txt > $O/parity-tail.txt; rm -f $O/parity.txt $O/ops0.txt $O/ops1.txt
ts end
