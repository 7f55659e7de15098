#!/bin/bash
# 2026-12-05 (thirty-third session), call 3 of 3 (the warm machine of calls q and r): `cinfer serve --device
# cuda` against llama-server (built in call r, .lcpp/) on the Qwen3-30B-A3B dims cut to 12 layers,
# bf16 random weights and their GGUF twin, one load generator driving both (bench/serve_cuda.sh
# make + bench: streamed /v1/completions, prompts of 200..2000 ids, 256 generated, 1 / 8 / 32 / 64
# streams, 2 requests a stream). The seventh session's cinfer TTFT on this model was void (the
# demo tokenizer without texts for most ids); this is its first valid run.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
[ -x .lcpp/bin/llama-server ] || ts "no llama-server: cinfer alone"
SERVE_SPECS="qwen3-30b-a3b-12l:bench/qwen3-30b-a3b.config.json:12" SERVE_STEPS="make bench" BENCH_DIR=/tmp/cb \
  SERVE_BUDGET=560 CINFER=$C OUT=$O timeout 575 bash bench/serve_cuda.sh > $O/serve.txt 2>&1
ts "serve rc $?"; grep -E "^(LOAD|qwen|made|FAIL|SKIP|==)" $O/serve.txt | head -30
ts end
