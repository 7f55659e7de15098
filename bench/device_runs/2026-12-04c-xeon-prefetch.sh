#!/bin/bash
# 2026-12-04 (twentieth session), third call: the CPU decode prefetch changes of this session (the
# next tile in byte order for short rows: bf16 / f16 / fp8 tiles, the bf16-activation tile, the
# 4-bit int16 and split tiles) on the GPU box's Intel Xeon, against the binary before them, so the
# AMD gains do not cost Intel. Carry .gpuz: gpu.tar.xz (make gpu-stage, after) and before-cinfer.xz
# (build/cinfer of dab7d36, the session's start, same libraries). cinfer bench on the CPU, the two
# binaries alternating, 16 / 4 / 1 threads: random bf16 Qwen3-0.6B dims and Qwen3-30B-A3B dims at
# 4 layers (bf16). No llama.cpp here (the carry has no room for its source beside two binaries).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
xz -dc .gpuz/before-cinfer.xz > /tmp/cinfer-before && chmod +x /tmp/cinfer-before
{ lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200; } > $O/machine.txt
ts start
timeout 120 $C make-random --config bench/qwen3-0.6b.config.json --out /tmp/q06 --dtype bf16 --seed 1 > $O/make.log 2>&1
timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/a3b4 --dtype bf16 --seed 1 --layers 4 >> $O/make.log 2>&1
ts "made $(du -sh /tmp/q06 /tmp/a3b4 | tr '\n' ' ')"
b() { timeout 60 "$@" 2>&1 | grep -E "^(prefill|decode) " | sed 's/  */ /g' | cut -c1-52 | tr '\n' ' '; }
for r in 1 2; do
  for t in 16 4 1; do
    for m in q06 a3b4; do
      g=64; [ $t = 1 ] && g=32
      ts "r$r t$t $m before: $(b /tmp/cinfer-before bench --model /tmp/$m --prompt-len 64 --gen $g --threads $t)"
      ts "r$r t$t $m after:  $(b $C bench --model /tmp/$m --prompt-len 64 --gen $g --threads $t)"
    done
  done
done
ts end
