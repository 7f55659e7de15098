// bench_serve.js — throughput and time-to-first-token of a running `cinfer serve` (not part
// of `make test`; numbers for the report).
//   node tests/server/bench_serve.js BASE_URL [all|tput|ttft] [OTHER_URL] [REPS]
// tput: aggregate decode tok/s for 1, 4 and 16 concurrent streams (each 128 tokens,
// ignore_eos, distinct prompts). ttft: the time to first token of chat turns 1..5 (each
// turn appends the previous answer and a new question; with prefix reuse on, turn N only
// prefills what is new), REPS chats (default 3) against BASE_URL and, interleaved chat by
// chat, against OTHER_URL (e.g. the same model served with --prefix-cache-mb 0); then the
// median turn-5 time to first token of each.
'use strict';
const base = process.argv[2];
async function post(url, path, body) {
  const t0 = performance.now();
  const r = await fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const reader = r.body.getReader();
  let first = null, text = '';
  const dec = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (first === null) { const s = dec.decode(value); if (s.includes('"content":"') && !s.includes('"content":""}')) first = performance.now() - t0; text += s; } else text += dec.decode(value);
  }
  return { ms: performance.now() - t0, ttft: first, text };
}
async function chat(url, rep) {   // five turns; returns [{ttft, prompt, cached}] per turn
  const out = [];
  let msgs = [];
  for (let turn = 1; turn <= 5; turn++) {
    msgs.push({ role: 'user', content: `Question ${turn} of chat ${rep}: tell me something about the number ${turn * 7 + rep * 131} and the sea, in detail, with examples.` });
    const r = await post(url, '/v1/chat/completions', { messages: msgs, max_tokens: 48, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const content = [...r.text.matchAll(/"content":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`)).join('');
    const usage = /"prompt_tokens":(\d+).*"cached_tokens":(\d+)/.exec(r.text);
    out.push({ ttft: r.ttft, prompt: +usage[1], cached: +usage[2] });
    msgs.push({ role: 'assistant', content });
  }
  return out;
}
const median = (a) => { const b = [...a].sort((x, y) => x - y); return b[b.length >> 1]; };
(async () => {
  const mode = process.argv[3] || 'all';
  if (mode === 'all' || mode === 'tput') {
    const N = 128;
    for (const c of [1, 4, 16]) {
      const t0 = performance.now();
      await Promise.all([...Array(c).keys()].map((i) => post(base, '/v1/completions', { prompt: `Stream ${i} of the bench says`, max_tokens: N, ignore_eos: true, temperature: 0 })));
      const s = (performance.now() - t0) / 1000;
      console.log(`${c} streams: ${(c * N / s).toFixed(1)} tok/s aggregate (${(N / s).toFixed(1)} per stream, ${s.toFixed(2)} s)`);
    }
  }
  if (mode === 'all' || mode === 'ttft') {
    // the same 5-turn chats against each server given (reuse on, reuse off, ...), interleaved
    // chat by chat so that both see the same machine load; turn 5's ttft median over reps
    const urls = [base, ...(process.argv[4] ? [process.argv[4]] : [])], reps = +(process.argv[5] || 3);
    const t5 = urls.map(() => []);
    for (let rep = 0; rep < reps; rep++)
      for (let u = 0; u < urls.length; u++) {
        const turns = await chat(urls[u], rep);
        turns.forEach((t, i) => console.log(`${urls[u]} chat ${rep} turn ${i + 1}: ttft ${t.ttft.toFixed(1)} ms, prompt ${t.prompt} tokens, cached ${t.cached}`));
        t5[u].push(turns[4]);
      }
    urls.forEach((url, u) => console.log(`${url}: turn 5 ttft median ${median(t5[u].map((t) => t.ttft)).toFixed(1)} ms over ${reps} chats (prompt ${t5[u][0].prompt}, cached ${t5[u].map((t) => t.cached).join('/')})`));
  }
})();
