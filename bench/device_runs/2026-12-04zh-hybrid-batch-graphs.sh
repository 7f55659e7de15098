#!/bin/bash
# 2026-12-04 (twenty-fifth session), third call: the hybrids' batch steps recorded as graphs
# (ci_runner_batch_step) on top of their paged attention rows. The GPU suite (parity cut to
# the hybrid and DeepSeek fixtures; test_paged's test_batch_graphs = replayed batch steps
# against eager ones on qwen3_5 / lfm2 / nemotron_h too), then cinfer serve on Qwen3.5-35B-A3B
# dims cut to 8 layers (6 DeltaNet + 2 gated attention, 256 experts top-8; bf16, made here)
# with graphs and with --no-graphs, both up, serve_load.py bench alternating at 8 and 32
# streams, then a check (concurrent = alone, a cached second turn, soak) on the graphs one.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/bm; mkdir -p $BD
( nice -n 5 timeout 240 $C make-random --config bench/qwen3.5-35b-a3b.config.json --out $BD/q35 --dtype bf16 --seed 1 --layers 8 > $O/make.log 2>&1
  python3 bench/extend_tokenizer.py models/demo $BD/q35 248320 >> $O/make.log 2>&1 ) &
PARITY_ONLY='deepseek_v3$|qwen3_5|lfm2|nemotron' OUT=$O/suite timeout 300 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"
tail -17 $O/suite.txt | cut -c1-60
mkdir -p /tmp/l && tar xzf $O/suite/logs.tar.gz -C /tmp/l 2>/dev/null; grep -hE "^FAIL" /tmp/l/logs/*.log | head
wait; ts "made $(du -sh $BD/q35 2>&1 | cut -f1)"; tail -2 $O/make.log
$C serve --model $BD/q35 --device cuda --port 18101 --parallel 32 --ctx 2048 --kv-blocks 1024 > $O/sg.log 2>&1 &
P1=$!
$C serve --model $BD/q35 --device cuda --port 18102 --parallel 32 --ctx 2048 --kv-blocks 1024 --no-graphs > $O/se.log 2>&1 &
P2=$!
for i in $(seq 1 300); do grep -q serving $O/sg.log && grep -q serving $O/se.log && break; sleep 0.5; done
ts "up: $(grep -h serving $O/sg.log $O/se.log | cut -c1-100)"
timeout 150 python3 bench/serve_load.py bench http://127.0.0.1:18101,http://127.0.0.1:18102 --names graphs,eager \
  --levels 8,32 --per-stream 2 --gen 128 --min 100 --max 600 --vocab 4096 2>&1 | grep -E "^LOAD"
ts "bench done"
timeout 60 python3 bench/serve_load.py check http://127.0.0.1:18101 --vocab 4096 --max 600 --n 8 --soak 10 2>&1 | grep -E "^PASS|^FAIL|^METRICS"
ts "check done"
kill $P1 $P2; wait
