#!/bin/bash
# 2026-12-04 (twenty-first session), sixth call: the serve changes on the device — paged prefill in
# whole chunks from the request's first start (one call after a reused prefix), the pipelined /
# split prefill attention — the ops (--quick), the GPU suite's serve and serve-paged steps, the
# chat TTFT breakdown of 2026-12-04e (turns 2 and 5 were two calls), and the 5-turn chat of
# serve_cuda.sh (reuse against --prefix-cache-mb 0).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER=$PWD/$C
ts start
timeout 150 $T --quick > $O/ops.log 2>&1
ts "ops --quick rc=$? $(grep '^# ' $O/ops.log | tail -1)"
grep -E "^FAIL" $O/ops.log | head
sdir=$(mktemp -d)
cp -r tests/fixtures/qwen3_tied "$sdir/m" && cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$sdir/m/"
$C serve --model "$sdir/m" --device cuda --port 18090 --parallel 8 --ctx 1024 --kv-blocks 16 2> $O/serve_server.log &
pid=$!
for i in $(seq 1 100); do grep -q 'serving' $O/serve_server.log && break; kill -0 $pid || break; sleep 0.2; done
timeout 100 python3 bench/serve_load.py check http://127.0.0.1:18090 --vocab 300 --max 400 --n 8 --soak 20 > $O/serve.log 2>&1
ts "serve check rc=$? $(grep -c ^PASS $O/serve.log) PASS $(grep -c ^FAIL $O/serve.log) FAIL"
grep ^FAIL $O/serve.log
kill $pid; wait $pid 2>/dev/null
SERVE_DEVICE=cuda timeout 120 bash tests/cli/serve_paged.sh > $O/serve_paged.log 2>&1
ts "serve-paged rc=$? $(tail -1 $O/serve_paged.log)"
timeout 200 bash bench/device_runs/2026-12-04e-ttft.sh > $O/ttft.log 2>&1
grep TURN $O/ttft.log
SERVE_STEPS="chat" SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb SERVE_BUDGET=150 timeout 160 bash bench/serve_cuda.sh > $O/chat.log 2>&1
grep CHAT $O/chat.log | sort -u
ts end
