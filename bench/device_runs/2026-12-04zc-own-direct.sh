#!/bin/bash
# 2026-12-04 (twenty-fourth session), ninth call: calls za / zb left DeepSeek's paged decode
# 2-4% behind the build before the paging after 4096 keys (mla_decode_kernel<18> 21.7 against
# 18.6 us). A session with a pool of its own (cinfer generate / bench / chat-less single use)
# now addresses its rows directly (its blocks are its positions'; checked when the table
# changes), so only sessions on a shared pool (the server) read tables. The GPU suite (dense
# chunks take the same path), then the A/B of call z on ds14 and the per-step tables of ds2.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
CB=/tmp/bef/.gpu/cinfer
[ -x $CB ] || { ts "no $CB (the machine was not the first call's): after only"; CB=$C; }
ts start
BD=/tmp/bm; mkdir -p $BD
( sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
  nice -n 5 timeout 240 $C make-random --config $BD/ds.json --out $BD/ds14 --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  nice -n 5 timeout 60 $C make-random --config $BD/ds.json --out $BD/ds2 --dtype bf16 --seed 1 --layers 2 >> $O/make.log 2>&1 ) &
OUT=$O/suite timeout 340 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -18 $O/suite.txt
wait; ts "made $(du -sh $BD/ds14 $BD/ds2 2>&1 | tr '\n' ' ')"
b() { timeout 90 "$@" --device cuda --gen 128 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
for r in 1 2; do
  for pl in 512 4096; do
    ts "ds14 pp$pl before r$r: $(b $CB bench --model $BD/ds14 --prompt-len $pl)"
    ts "ds14 pp$pl after  r$r: $(b $C bench --model $BD/ds14 --prompt-len $pl)"
  done
done
for v in after before; do
  B=$C; [ $v = before ] && B=$CB
  for g in 1 5; do
    timeout 60 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-summary per-kernel $B bench --model $BD/ds2 --device cuda --prompt-len 4096 --gen $g > $O/ncu-g$g.txt 2>&1
  done
  ts "per-step table after 4096, $v"; python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt 2>&1 | grep -E "steps|mla_|kv_store"
done
rm -f $O/ncu-g*.txt
tar czf $O/suite-logs.tgz -C $O suite 2>/dev/null; rm -rf $O/suite
ts end
