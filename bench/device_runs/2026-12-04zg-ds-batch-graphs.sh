#!/bin/bash
# 2026-12-04 (twenty-fifth session), second call: DeepSeek V3 / V3.2 batch steps recorded as
# graphs (ci_runner_batch_step). The GPU suite (parity cut to the DeepSeek and Qwen3.5 fixtures
# to leave room: test_paged's new test_batch_graphs = replayed batch steps against eager ones,
# on deepseek_v3 / v32, qwen3_tied, qwen3_5), then the serving step's worth: cinfer serve on a
# V2-Lite-dims DeepSeek (14 layers, bf16, q_lora 1024, made here) with graphs and with
# --no-graphs, both up, serve_load.py bench alternating between them at 8 and 32 streams.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/bm; mkdir -p $BD
( sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
  nice -n 5 timeout 240 $C make-random --config $BD/ds.json --out $BD/ds14 --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  python3 bench/extend_tokenizer.py models/demo $BD/ds14 102400 >> $O/make.log 2>&1 ) &
PARITY_ONLY='deepseek|qwen3_5' OUT=$O/suite timeout 330 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"
tail -17 $O/suite.txt | cut -c1-60
mkdir -p /tmp/l && tar xzf $O/suite/logs.tar.gz -C /tmp/l 2>/dev/null; grep -E "^FAIL" /tmp/l/logs/*.log | head
wait; ts "made $(du -sh $BD/ds14 2>&1 | cut -f1)"; tail -2 $O/make.log
$C serve --model $BD/ds14 --device cuda --port 18101 --parallel 32 --ctx 2048 --kv-blocks 1024 > $O/sg.log 2>&1 &
P1=$!
$C serve --model $BD/ds14 --device cuda --port 18102 --parallel 32 --ctx 2048 --kv-blocks 1024 --no-graphs > $O/se.log 2>&1 &
P2=$!
for i in $(seq 1 300); do grep -q serving $O/sg.log && grep -q serving $O/se.log && break; sleep 0.5; done
ts "up: $(grep -h serving $O/sg.log $O/se.log | cut -c1-100)"
timeout 200 python3 bench/serve_load.py bench http://127.0.0.1:18101,http://127.0.0.1:18102 --names graphs,eager \
  --levels 8,32 --per-stream 1 --gen 128 --min 100 --max 600 --vocab 4096 2>&1 | grep -E "^LOAD"
ts "bench done"
kill $P1 $P2; wait
