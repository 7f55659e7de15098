#!/bin/bash
# 2026-12-04 (twenty-third session), third call: the GPU suite with decode attention merged in
# its own launch (attn_decode2_kernel's last block of a (row, kv head) merges the chunks;
# CINFER_CUDA_ATTN_FUSE, default 1), the attention ops with it off, then Qwen3-30B-A3B dims
# 12 layers bf16 and mlx4 (make-random --seed 1, bench/make_q4_pair.py) decode after 512 and
# after 4096, fused vs not, alternating, and the mlx4 per-step table.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( nice -n 5 timeout 300 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1 ) &
OUT=$O/suite timeout 330 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -15 $O/suite.txt
for o in 'cuda attention' 'cuda rope_attend'; do
  CINFER_CUDA_ATTN_FUSE=0 timeout 60 $T --quick --only "$o" > $O/fuse0.txt 2>&1; ts "fuse=0 $o rc $? $(tail -1 $O/fuse0.txt)"
done
wait; ts "made $(du -sh /tmp/q30 /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ')"
b() { timeout 60 "$@" --device cuda --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-52; }
for r in 1 2 3; do
  for m in 1 0; do
    ts "mlx4 p512 fuse=$m r$r: $(CINFER_CUDA_ATTN_FUSE=$m b $C bench --model /tmp/q30pair/mlx4 --prompt-len 512)"
    ts "bf16 p512 fuse=$m r$r: $(CINFER_CUDA_ATTN_FUSE=$m b $C bench --model /tmp/q30 --prompt-len 512)"
  done
done
for r in 1 2; do
  for m in 1 0; do
    ts "bf16 p4096 fuse=$m r$r: $(CINFER_CUDA_ATTN_FUSE=$m b $C bench --model /tmp/q30 --prompt-len 4096)"
  done
done
for g in 1 5; do
  timeout 60 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen $g > $O/ncu-g$g.txt 2>&1
done
ts "per-step table, fused"; python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt 2>&1 | head -16
rm -f $O/ncu-g*.txt $O/fuse0.txt
tar czf $O/suite-logs.tgz -C $O suite 2>/dev/null; rm -rf $O/suite
ts end
