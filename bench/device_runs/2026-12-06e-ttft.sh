#!/bin/bash
# 2026-12-06 (thirty-seventh session; 2026-12-05k with the queue and admission counters): where a reused
# chat turn's time to first token goes (issue
# #19: turn 5 of serve_cuda.sh's chat). One cinfer serve --device cuda (Qwen3-8B dims 12 layers
# bf16, prefix reuse on), 5-turn chats as serve_load.py chat makes them (1000 ids, then + 124 a
# turn), one request at a time; around each request /metrics' prefill seconds and the engine's
# submission-to-first-token seconds: TTFT = prefill call + the engine's rest (admission, match,
# copy, sampling) + the HTTP side (request parse, the first chunk's way out). Expects the model at
# /tmp/cb/qwen3-8b-12l with its tokenizer (serve_cuda.sh's make step) unless MODEL says where.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
MODEL=${MODEL:-/tmp/cb/qwen3-8b-12l}
$C serve --model $MODEL --device cuda --port 18090 --parallel 4 --ctx 4096 --gpu-memory 0.2 2> $O/serve-ttft.log &
pid=$!
for i in $(seq 1 150); do grep -q serving $O/serve-ttft.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
ts "server: $(grep -m1 serving $O/serve-ttft.log | cut -c1-120)"
timeout 100 python3 - <<'PY'
import sys, time, random, http.client, statistics
sys.path.insert(0, 'bench')
import serve_load as s
u = 'http://127.0.0.1:18090'
def metrics(*names):
    c = http.client.HTTPConnection('127.0.0.1', 18090, timeout=30); c.request('GET', '/metrics')
    t = c.getresponse().read().decode(); c.close()
    got = {}
    for l in t.splitlines():
        for n in names:
            if l.startswith(n + ' '): got[n] = float(l.split()[1])
    return [got.get(n, float('nan')) for n in names]
M = ('cinfer_prefill_seconds_total', 'cinfer_prefill_tokens_total', 'cinfer_first_token_seconds_total', 'cinfer_queue_seconds_total', 'cinfer_admission_seconds_total')
rng = random.Random(5)
rows = {}
for rep in range(4):
    p = [rng.randrange(4000) for _ in range(1000)]
    for k in range(1, 6):
        a = metrics(*M)
        ttft, n, text, cached, st = s.complete(u, p, 64)
        b = metrics(*M)
        rows.setdefault(k, []).append((ttft, b[0] - a[0], b[1] - a[1], b[2] - a[2], cached, len(p), b[3] - a[3], b[4] - a[4]))
        p = p + [rng.randrange(4000) for _ in range(124)]
for k, v in sorted(rows.items()):
    v = v[1:]   # the first chat warms the server
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"TURN {k} prompt={v[0][5]} cached={v[0][4]} prefilled={med(2):.0f} ttft_ms={1e3*med(0):.2f} "
          f"prefill_call_ms={1e3*med(1):.2f} engine_rest_ms={1e3*(med(3)-med(1)):.2f} (queue {1e3*med(6):.2f} admission "
          f"{1e3*med(7):.2f}) http_ms={1e3*(med(0)-med(3)):.2f}",
          flush=True)
PY
kill $pid; wait $pid 2>/dev/null
