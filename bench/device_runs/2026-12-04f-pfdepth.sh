#!/bin/bash
# 2026-12-04 (twentieth session), sixth call: call e found a reused chat turn's prefill call slow
# (344-420 new tokens after 896-1920 cached: 9.8-21.2 ms, against 12.7 ms for 1000 fresh ones). Is it
# the rows (GEMM shapes) or the depth (attention over the cached prefix)? cinfer bench prefill of the
# same token counts at depth 0 and at the chat's depths, Qwen3-8B dims 12 layers bf16.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts made
for pd in "344 0" "344 1920" "352 0" "352 1280" "420 0" "420 896" "412 1536" "1000 0" "344 1920"; do set -- $pd
  ts "p$1 d$2: $(timeout 30 $C bench --model /tmp/q8 --device cuda --prompt-len $1 --depth $2 --gen 2 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-70)"
done
ts end
