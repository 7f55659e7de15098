#!/bin/bash
# 2026-12-04 (twentieth session), fifth call: where a reused chat turn's time to first token goes on
# the device (#19: turn 5 at 9.0 ms with reuse against 25.8 without, 2.9x of the 5x wanted; the CPU
# server's fixed cost per request is ~0.4 ms). One cinfer serve --device cuda (Qwen3-8B dims, 12
# layers, bf16, prefix reuse on), 5-turn chats sent one request at a time; around each request the
# /metrics prefill counters, so each turn prints its TTFT, its prefill call's own seconds and tokens,
# and the rest (HTTP, admission, sampling, the first chunk's way out).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
SERVE_STEPS=make SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb timeout 150 bash bench/serve_cuda.sh > $O/make.log 2>&1
python3 bench/extend_tokenizer.py models/demo /tmp/sb/q8 >> $O/make.log 2>&1
ts "made: $(du -sh /tmp/sb/q8 2>&1)"
$C serve --model /tmp/sb/q8 --device cuda --port 18090 --parallel 4 --ctx 4096 --gpu-memory 0.2 2> $O/serve.log &
pid=$!
for i in $(seq 1 150); do grep -q serving $O/serve.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
ts "server: $(grep -m1 serving $O/serve.log)"
timeout 120 python3 - <<'PY'
import sys, time, random, http.client, statistics
sys.path.insert(0, 'bench')
import serve_load as s
u = 'http://127.0.0.1:18090'
def metric(name):
    c = http.client.HTTPConnection('127.0.0.1', 18090, timeout=30); c.request('GET', '/metrics')
    t = c.getresponse().read().decode(); c.close()
    for l in t.splitlines():
        if l.startswith(name + ' '): return float(l.split()[1])
    return float('nan')
rng = random.Random(5)
rows = {}
for rep in range(4):
    p = [rng.randrange(4000) for _ in range(1000)]
    for k in range(1, 6):
        s0, n0 = metric('cinfer_prefill_seconds_total'), metric('cinfer_prefill_tokens_total')
        t0 = time.perf_counter()
        ttft, n, text, cached, st = s.complete(u, p, 64)
        s1, n1 = metric('cinfer_prefill_seconds_total'), metric('cinfer_prefill_tokens_total')
        rows.setdefault(k, []).append((ttft, s1 - s0, n1 - n0, cached, len(p)))
        p = p + [rng.randrange(4000) for _ in range(316)]
for k, v in sorted(rows.items()):
    v = v[1:] if len(v) > 1 else v   # the first chat warms the server
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"TURN {k} prompt={v[0][4]} cached={v[0][3]} prefilled={med(2):.0f} ttft_ms={1e3*med(0):.2f} "
          f"prefill_call_ms={1e3*med(1):.2f} rest_ms={1e3*(med(0)-med(1)):.2f}", flush=True)
PY
kill $pid; wait $pid 2>/dev/null
ts end
