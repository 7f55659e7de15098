# 2026-12-03 (fourteenth session): where the hybrids' prefill and decode time goes on the H200
# (issue #17). The bench checkpoints of tests/gpu/bench.sh's hyb entry (random bf16, real dims,
# the first layers of the real pattern), a plain `cinfer bench` pp4096 of each, then ncu
# kernel-time lists (serialised) of a prefill (pp4096, gen 1: the warm-up's prefill and the
# timed one, 3 steps) and of a decode (pp16, gen 9: 11 steps, two 16-token prefills).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for spec in lfm2:bench/lfm2-8b-a1b.config.json:8 nemh:bench/nemotron-3-nano-30b-a3b.config.json:6 \
            q35:bench/qwen3.5-35b-a3b.config.json:4; do
  IFS=: read -r m cfg L <<< "$spec"
  timeout 150 $C make-random --config $cfg --out /tmp/$m --dtype bf16 --seed 1 --layers $L > /dev/null; ts "made $m rc $?"
  timeout 100 $C bench --model /tmp/$m --device cuda --prompt-len 4096 --gen 32 > $O/bench-$m.txt 2>&1
  ts "bench $m rc $?: $(grep -i 'tok/s' $O/bench-$m.txt | tr '\n' ' ')"
  timeout 150 $NCU --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --print-summary per-kernel \
    $C bench --model /tmp/$m --device cuda --prompt-len 4096 --gen 1 > $O/ncu-pp-$m.txt 2>&1; ts "ncu pp $m rc $?"
  timeout 150 $NCU --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --print-summary per-kernel \
    $C bench --model /tmp/$m --device cuda --prompt-len 16 --gen 9 > $O/ncu-tg-$m.txt 2>&1; ts "ncu tg $m rc $?"
  rm -rf /tmp/$m
done
ts end
