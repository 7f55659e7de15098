#!/bin/bash
# 2026-12-04 (twenty-first session), last call: the session's final CUDA code — test_cuda_ops
# --quick on the defaults, the GPU suite's ops-flash step (the prefill attention's other forms),
# and the serve check of the suite's serve step.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $T --quick > $O/ops.log 2>&1
ts "ops --quick rc=$? $(grep '^# ' $O/ops.log | tail -1)"
grep -E "^FAIL" $O/ops.log | head
for sw in 'CINFER_CUDA_FLASH_PIPE=0' 'CINFER_CUDA_FLASH_SPLIT=0 CINFER_CUDA_FLASH_BK=16 CINFER_CUDA_FLASH_GQA=0' 'CINFER_CUDA_FLASH_LDM=0'; do
  for o in 'cuda attention' 'cuda rope_attend'; do env $sw timeout 60 $T --quick --only "$o" > $O/flash.log 2>&1; ts "$sw $o rc=$? $(grep '^# ' $O/flash.log | tail -1)"; done
done
sdir=$(mktemp -d)
cp -r tests/fixtures/qwen3_tied "$sdir/m" && cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$sdir/m/"
$C serve --model "$sdir/m" --device cuda --port 18090 --parallel 8 --ctx 1024 --kv-blocks 16 2> $O/serve_server.log &
pid=$!
for i in $(seq 1 100); do grep -q 'serving' $O/serve_server.log && break; kill -0 $pid || break; sleep 0.2; done
timeout 60 python3 bench/serve_load.py check http://127.0.0.1:18090 --vocab 300 --max 400 --n 8 --soak 10 > $O/serve.log 2>&1
ts "serve check rc=$? $(grep -c ^PASS $O/serve.log) PASS $(grep -c ^FAIL $O/serve.log) FAIL"
kill $pid; wait $pid 2>/dev/null
ts end
