#!/bin/bash
# 2026-12-05 (thirty-third session), after call s on the same warm machine (run inline as this
# command): the Qwen3-8B dims cut to 12 layers, bf16, against llama-server (built in call r), and
# the 5-turn chat (reuse against --prefix-cache-mb 0).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh >/dev/null 2>&1
SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_STEPS="make bench chat" BENCH_DIR=/tmp/cb SERVE_BUDGET=420 \
  CINFER=$C OUT=$O timeout 430 bash bench/serve_cuda.sh > $O/serve8b.txt 2>&1
echo "rc $?"; grep -E "^(qwen|made|FAIL|SKIP|==)" $O/serve8b.txt | head -30
