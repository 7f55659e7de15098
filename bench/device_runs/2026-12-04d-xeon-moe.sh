#!/bin/bash
# 2026-12-04 (twentieth session), fourth call: call c's Qwen3-30B-A3B dims bf16 rows on the Xeon
# moved -1..-7% at 4 and 16 threads in three of four pairs (q06 the other way): more rounds of just
# those, the two binaries alternating (order swapped every round), decode 128 after 16.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
xz -dc .gpuz/before-cinfer.xz > /tmp/cinfer-before && chmod +x /tmp/cinfer-before
ts start
timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/a3b4 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1
b() { timeout 60 "$@" 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-52 | tr '\n' ' '; }
for r in 1 2 3 4; do
  for t in 16 4; do
    if [ $((r % 2)) = 1 ]; then
      ts "r$r t$t before: $(b /tmp/cinfer-before bench --model /tmp/a3b4 --prompt-len 16 --gen 128 --threads $t)"
      ts "r$r t$t after:  $(b $C bench --model /tmp/a3b4 --prompt-len 16 --gen 128 --threads $t)"
    else
      ts "r$r t$t after:  $(b $C bench --model /tmp/a3b4 --prompt-len 16 --gen 128 --threads $t)"
      ts "r$r t$t before: $(b /tmp/cinfer-before bench --model /tmp/a3b4 --prompt-len 16 --gen 128 --threads $t)"
    fi
  done
done
ts end
