#!/bin/bash
# 2026-12-04 (twenty-third session), first call: the GPU suite with the quantized GEMVs' param
# window (quant_mma.cuh qt_rows: a quad's four 16-bit param rows loaded 4 groups at a time, one
# row a lane, handed round by shuffles), then Qwen3-30B-A3B dims 12 layers mlx4 (make-random
# --seed 1, bench/make_q4_pair.py) decode after 512, alternating with the lib of 6e0234c
# (.gpuz/before.so.xz, same binary), and the per-step kernel tables of both.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/bef && cp .gpu/cinfer /tmp/bef/ && xz -dc .gpuz/before.so.xz > /tmp/bef/libcinfer_cuda.so
CB=/tmp/bef/cinfer
ts start
( nice -n 5 timeout 300 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1 ) &
OUT=$O/suite timeout 330 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -16 $O/suite.txt
wait; ts "made $(du -sh /tmp/q30 /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ')"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
for r in 1 2 3; do
  ts "mlx4 before r$r: $(b $CB bench --model /tmp/q30pair/mlx4)"
  ts "mlx4 after  r$r: $(b $C bench --model /tmp/q30pair/mlx4)"
done
for v in after before; do
  B=$C; [ $v = before ] && B=$CB
  for g in 1 5; do
    timeout 60 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $B bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen $g > $O/ncu-g$g.txt 2>&1
  done
  ts "per-step table, $v"; python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt 2>&1 | head -18
done
rm -f $O/ncu-g*.txt
tar czf $O/suite-logs.tgz -C $O suite 2>/dev/null; rm -rf $O/suite
ts end
