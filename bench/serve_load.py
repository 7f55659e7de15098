#!/usr/bin/env python3
"""serve_load.py: one load generator for `cinfer serve` and llama-server (OpenAI /v1/completions,
token-id prompts, streamed), python3 standard library only (the device has no node).

  serve_load.py bench URL[,URL2...] [--levels 1,8,32,64] [--per-stream 2] [--gen 256]
                [--min 200] [--max 2000] [--vocab V] [--seed S] [--names a,b]
      For each concurrency C: C streams, each sending --per-stream requests one after another
      (prompts of min..max random ids, the same list for every server, generating --gen tokens
      with ignore_eos); the servers take turns level by level (order alternating). Prints per
      (server, C): aggregate output tok/s (completion tokens of all requests / wall time of the
      level) and p50 / p99 time to first token, as lines "LOAD name C=.. tok/s=.. ttft_p50=..
      ttft_p99=.. requests=.. errors=..".
  serve_load.py chat URL[,URL2] [--turns 5] [--reps 3] ...
      Multi-turn chats: each turn's prompt is the previous prompt + its reply + 60 new ids; the
      time to first token of each turn, median over --reps chats; "CHAT name turn=k ttft=.. cached=..".
  serve_load.py check URL [--n 8] [--soak S] ...
      cinfer only. N concurrent seeded requests (temperature 0.8) each equal to the same request
      alone (text and token count); a second turn takes its prefix from the cache (cached_tokens
      >= 128); a soak of S seconds with random lengths and clients that hang up mid-stream; then
      /metrics: no 5xx, and once idle no cache block in use. "PASS name" / "FAIL name: why" lines.
"""
import http.client, json, random, sys, threading, time, urllib.parse

def opts(argv, **defaults):
    o = dict(defaults)
    i = 0
    pos = []
    while i < len(argv):
        a = argv[i]
        if a.startswith('--'):
            k = a[2:].replace('-', '_')
            if k not in o: sys.exit(f"serve_load: unknown option {a}")
            o[k] = type(o[k])(argv[i + 1]) if o[k] is not None else argv[i + 1]
            i += 2
        else:
            pos.append(a)
            i += 1
    return pos, o

def conn(url, timeout=600):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)

_model_ids = {}
def model_id(url):
    """The id the server serves (GET /v1/models), asked once per server."""
    if url not in _model_ids:
        c = conn(url, 30)
        c.request("GET", "/v1/models")
        _model_ids[url] = json.loads(c.getresponse().read())["data"][0]["id"]
        c.close()
    return _model_ids[url]

def complete(url, prompt, gen, stream=True, seed=None, temperature=0.0, hang_up_after=None):
    """One /v1/completions request. Returns (ttft_s or None, completion tokens, text, cached, status)."""
    body = {"model": model_id(url), "prompt": prompt, "max_tokens": gen, "stream": stream, "ignore_eos": True,
            "temperature": temperature}
    if seed is not None: body["seed"] = seed
    if stream: body["stream_options"] = {"include_usage": True}
    c = conn(url)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        return None, 0, data.decode(errors="replace")[:300], 0, r.status
    if not stream:
        j = json.loads(r.read())
        c.close()
        u = j.get("usage", {})
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return None, u.get("completion_tokens", 0), j["choices"][0]["text"], cached, 200
    ttft, events, text, usage = None, 0, [], None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:"): continue
        d = line[5:].strip()
        if d == b"[DONE]": break
        j = json.loads(d)
        if j.get("usage"): usage = j["usage"]
        ch = j.get("choices") or []
        if ch:
            if ttft is None: ttft = time.perf_counter() - t0
            events += 1
            text.append(ch[0].get("text", ""))
            if hang_up_after is not None and events >= hang_up_after:
                c.close()
                return ttft, events, "".join(text), 0, -1
    c.close()
    n = usage.get("completion_tokens", events) if usage else events
    cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return ttft, n, "".join(text), cached, 200

def pct(xs, p):
    if not xs: return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]

def run_level(url, prompts, C, per, gen):
    res, lock = [], threading.Lock()
    def worker(w):
        for k in range(per):
            p = prompts[(w * per + k) % len(prompts)]
            try:
                r = complete(url, p, gen)
            except Exception as ex:  # a failed connection counts as an error
                r = (None, 0, str(ex), 0, 0)
            with lock: res.append(r)
    th = [threading.Thread(target=worker, args=(w,)) for w in range(C)]
    t0 = time.perf_counter()
    for t in th: t.start()
    for t in th: t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in res if r[4] == 200]
    toks = sum(r[1] for r in ok)
    ttfts = [r[0] for r in ok if r[0] is not None]
    errs = [r for r in res if r[4] != 200]
    return toks / wall, pct(ttfts, 50), pct(ttfts, 99), len(res), len(errs), wall, (errs[0][2] if errs else "")

def bench(urls, o):
    rng = random.Random(o["seed"])
    levels = [int(x) for x in o["levels"].split(",")]
    names = o["names"].split(",") if o["names"] else [f"s{i}" for i in range(len(urls))]
    nprompt = max(levels) * o["per_stream"]
    prompts = [[rng.randrange(o["vocab"]) for _ in range(rng.randint(o["min"], o["max"]))] for _ in range(nprompt)]
    for li, C in enumerate(levels):
        order = list(range(len(urls)))
        if li % 2: order.reverse()
        for i in order:
            # a level's prompts start at a different offset per level, so no level reuses another's
            ps = prompts[(li * 7) % len(prompts):] + prompts[:(li * 7) % len(prompts)]
            tps, p50, p99, n, ne, wall, e = run_level(urls[i], ps, C, o["per_stream"], o["gen"])
            print(f"LOAD {names[i]} C={C} tok/s={tps:.1f} ttft_p50={p50:.3f} ttft_p99={p99:.3f} requests={n} "
                  f"errors={ne} wall={wall:.1f}" + (f" first_error={e!r}" if ne else ""), flush=True)

def chat(urls, o):
    """Turn k's prompt: turn k-1's prompt, then gen + 60 fresh ids (the reply's ids are not
    known from its text, so the reply is recomputed as part of the new turn on every server)."""
    rng = random.Random(o["seed"])
    names = o["names"].split(",") if o["names"] else [f"s{i}" for i in range(len(urls))]
    res = {}
    for rep in range(o["reps"]):
        turns = [[rng.randrange(o["vocab"]) for _ in range(o["min"])]]
        for _ in range(o["turns"] - 1):
            turns.append(turns[-1] + [rng.randrange(o["vocab"]) for _ in range(o["gen"] + 60)])
        for i, url in enumerate(urls):
            for k, prompt in enumerate(turns, 1):
                ttft, n, text, cached, st = complete(url, prompt, o["gen"])
                res.setdefault((i, k), []).append((ttft if ttft is not None else float("nan"), cached, len(prompt)))
    for (i, k), v in sorted(res.items()):
        print(f"CHAT {names[i]} turn={k} prompt={v[0][2]} ttft_median={pct([x[0] for x in v], 50):.4f} "
              f"cached={v[0][1]}", flush=True)

def check(url, o):
    rng = random.Random(o["seed"])
    fails = 0
    def report(name, ok, why=""):
        nonlocal fails
        print(("PASS " + name) if ok else f"FAIL {name}: {why}", flush=True)
        fails += not ok
    N = o["n"]
    prompts = [[rng.randrange(o["vocab"]) for _ in range(rng.randint(o["min"], o["max"]))] for _ in range(N)]
    solo = [complete(url, p, 48, stream=False, seed=100 + i, temperature=0.8) for i, p in enumerate(prompts)]
    res = [None] * N
    def one(i): res[i] = complete(url, prompts[i], 48, stream=True, seed=100 + i, temperature=0.8)
    th = [threading.Thread(target=one, args=(i,)) for i in range(N)]
    for t in th: t.start()
    for t in th: t.join()
    bad = [i for i in range(N) if res[i][4] != 200 or res[i][2] != solo[i][2] or res[i][1] != solo[i][1]]
    report(f"{N} concurrent seeded requests (streamed) each equal to the same request alone (text, count)", not bad,
           f"requests {bad[:5]} differ: {res[bad[0]][2][:80]!r} vs {solo[bad[0]][2][:80]!r}" if bad else "")
    p = prompts[0] + [rng.randrange(o["vocab"]) for _ in range(300)]
    complete(url, p, 16, stream=False)
    t2 = p + [rng.randrange(o["vocab"]) for _ in range(40)]
    _, _, _, cached, st = complete(url, t2, 16, stream=False)
    report("a second turn takes its prefix from the cache", st == 200 and cached >= 128, f"status {st}, cached {cached}")
    # soak: random lengths, some clients hang up mid-stream
    stop = time.time() + o["soak"]
    errs, done, lock = [], [0], threading.Lock()
    def soaker(w):
        r = random.Random(w)
        while time.time() < stop:
            pr = [r.randrange(o["vocab"]) for _ in range(r.randint(1, o["max"]))]
            hang = r.randint(1, 20) if r.random() < 0.3 else None
            try:
                x = complete(url, pr, r.randint(1, 200), hang_up_after=hang)
                with lock:
                    done[0] += 1
                    if x[4] not in (200, -1): errs.append((x[4], x[2][:200]))
            except Exception as ex:
                with lock: errs.append((0, str(ex)))
    th = [threading.Thread(target=soaker, args=(w,)) for w in range(o["n"])]
    for t in th: t.start()
    for t in th: t.join()
    report(f"soak of {o['soak']} s ({done[0]} requests, random lengths, 30% hang up mid-stream): no error response",
           not errs and done[0] > 0, f"{len(errs)} errors, first {errs[:1]}")
    m = {}
    for _ in range(100):   # idle: the scheduler settles the hung-up sequences
        c = conn(url, 30)
        c.request("GET", "/metrics")
        txt = c.getresponse().read().decode()
        c.close()
        m = {}
        for line in txt.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                m[k] = float(v)
        if m.get("cinfer_active_sequences", 1) == 0 and m.get("cinfer_kv_blocks_used", 0) == 0: break
        time.sleep(0.1)
    report("idle after the soak: no sequence active, no cache block in use (the pool whole)",
           m.get("cinfer_active_sequences") == 0 and m.get("cinfer_kv_blocks_used", 0) == 0,
           f"active {m.get('cinfer_active_sequences')}, blocks used {m.get('cinfer_kv_blocks_used')}")
    k5 = 'cinfer_responses_total{class="5xx"}'
    report("no 5xx response", m.get(k5, 0) == 0, f"{m.get(k5)} 5xx")
    print(f"METRICS kv_blocks={m.get('cinfer_kv_blocks')} cached={m.get('cinfer_kv_blocks_cached')} "
          f"hits={m.get('cinfer_kv_block_hits_total')} lookups={m.get('cinfer_kv_block_lookups_total')} "
          f"waits={m.get('cinfer_kv_waits_total')}", flush=True)
    return fails

def main():
    if len(sys.argv) < 3: sys.exit(__doc__)
    mode = sys.argv[1]
    pos, o = opts(sys.argv[2:], levels="1,8,32,64", per_stream=2, gen=256, min=200, max=2000, vocab=4096, seed=1,
                  names="", turns=5, reps=3, n=8, soak=20)
    urls = pos[0].split(",")
    if mode == "bench": bench(urls, o)
    elif mode == "chat": chat(urls, o)
    elif mode == "check": sys.exit(1 if check(urls[0], o) else 0)
    else: sys.exit(__doc__)

if __name__ == "__main__":
    main()
