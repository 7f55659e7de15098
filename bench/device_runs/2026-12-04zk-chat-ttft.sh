#!/bin/bash
# 2026-12-04 (twenty-fifth session), after the last code: issue #19's 5-turn chat again (the
# target: turn 5's time to first token >= 5x faster with prefix reuse than without), now that a
# turn goes on from the previous turn's last block (copied; taken over since the 24th session)
# instead of recomputing it. serve_cuda.sh's make + chat steps on the Qwen3-8B dims, 12 layers.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_STEPS="make chat" SERVE_BUDGET=190 OUT=$O \
  bash bench/serve_cuda.sh 2>&1 | grep -E "CHAT|FAIL|made|cinfer: serve" | cut -c1-160
ts done
