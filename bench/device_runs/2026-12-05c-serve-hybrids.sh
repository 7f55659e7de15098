#!/bin/bash
# 2026-12-05 (twenty-eighth session), third call: the GPU suite steps the first two calls did not
# reach (their 320 / 380 s ran out beside the checkpoint writing), on main (src as 2c38bae: the
# tensor-parallel CPU sessions' ci_out_proj in every block): serve-qh and serve-nh (the qwen3_5 and
# nemotron_h fixtures behind `cinfer serve --device cuda` on a 16-block pool: bench/serve_load.py
# check) and serve-paged (tests/cli/serve_paged.sh on the device), as tests/gpu/run.sh runs them.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1 CINFER=$PWD/.gpu/cinfer
ts start
port=18092
for f in qwen3_5 nemotron_h; do
  d=$(mktemp -d); cp -r tests/fixtures/$f $d/m; cp models/demo/tokenizer.json models/demo/tokenizer_config.json $d/m/
  $C serve --model $d/m --device cuda --port $port --parallel 8 --ctx 1024 --kv-blocks 16 2> $O/$f.server.log &
  pid=$!
  for i in $(seq 1 100); do grep -q serving $O/$f.server.log && break; kill -0 $pid || break; sleep 0.2; done
  timeout 120 python3 bench/serve_load.py check http://127.0.0.1:$port --vocab 300 --max 400 --n 8 --soak 20 > $O/$f.check.log 2>&1
  ts "$f check rc $?: $(grep -c '^PASS' $O/$f.check.log) PASS, $(grep -c '^FAIL' $O/$f.check.log) FAIL"
  grep -E "^FAIL" $O/$f.check.log | head -5
  kill $pid; wait $pid 2>/dev/null
  port=$((port + 1))
done
timeout 150 env SERVE_DEVICE=cuda bash tests/cli/serve_paged.sh > $O/serve_paged.log 2>&1
ts "serve_paged rc $?: $(grep -c '^PASS' $O/serve_paged.log) PASS, $(grep -c '^FAIL' $O/serve_paged.log) FAIL"
grep -E "^FAIL" $O/serve_paged.log | head -5
ts end
