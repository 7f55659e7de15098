#!/bin/bash
# 2026-12-04 (twenty-fourth session), eleventh call: call zc (sessions with pools of their own
# address rows directly) still had mla_decode_kernel<18> at 20.2 us against 18.6 before the
# paging (4096 keys). Here mla_attn_kernel and mla_decode_kernel have an unpaged instance with
# the addressing of before (PG false; both held to 128 registers): the checks and A/B of call zb.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
CB=/tmp/bef/.gpu/cinfer
[ -x $CB ] || { ts "no $CB (the machine was not the first call's): after only"; CB=$C; }
ts start
BD=/tmp/bm; mkdir -p $BD
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
( nice -n 5 timeout 120 $C make-random --config $BD/ds.json --out $BD/ds4 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
timeout 150 $T --only mla > $O/ops-mla.txt 2>&1; ts "ops mla rc $? $(grep -c '^PASS' $O/ops-mla.txt) pass $(grep -c '^FAIL' $O/ops-mla.txt) fail"
timeout 150 $T --only dsa > $O/ops-dsa.txt 2>&1; ts "ops dsa rc $? $(grep -c '^PASS' $O/ops-dsa.txt) pass $(grep -c '^FAIL' $O/ops-dsa.txt) fail"
grep '^FAIL' $O/ops-*.txt | head
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_paged 2>&1 | tail -4
wait; ts "made $(du -sh $BD/ds4 2>&1)"
b() { timeout 90 "$@" --device cuda --gen 128 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
for r in 1 2; do
  for pl in 512 4096; do
    ts "ds4 pp$pl before r$r: $(b $CB bench --model $BD/ds4 --prompt-len $pl)"
    ts "ds4 pp$pl after  r$r: $(b $C bench --model $BD/ds4 --prompt-len $pl)"
  done
done
for v in after before; do
  B=$C; [ $v = before ] && B=$CB
  for g in 1 5; do
    timeout 60 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $B bench --model $BD/ds4 --device cuda --prompt-len 4096 --gen $g > $O/ncu-g$g.txt 2>&1
  done
  ts "per-step table after 4096, $v"; python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt 2>&1 | grep -E "steps|mla_|kv_store" 
done
rm -f $O/ncu-g*.txt
ts end
