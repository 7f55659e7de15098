// bench_serve.js — throughput and time-to-first-token of a running `cinfer serve` (not part
// of `make test`; numbers for the report). Usage: node tests/server/bench_serve.js BASE_URL
// Prints aggregate decode tok/s for 1, 4, 8 and 16 concurrent streams (each 128 tokens,
// ignore_eos, distinct prompts), then the time to first token of chat turns 1..5 (each
// turn appends the previous answer and a new question; with prefix reuse on, turn N only
// prefills what is new).
'use strict';
const base = process.argv[2];
async function post(path, body) {
  const t0 = performance.now();
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
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
(async () => {
  const N = 128;
  for (const c of [1, 4, 8, 16]) {
    const t0 = performance.now();
    await Promise.all([...Array(c).keys()].map((i) => post('/v1/completions', { prompt: `Stream ${i} of the bench says`, max_tokens: N, ignore_eos: true, temperature: 0 })));
    const s = (performance.now() - t0) / 1000;
    console.log(`${c} streams: ${(c * N / s).toFixed(1)} tok/s aggregate (${(N / s).toFixed(1)} per stream, ${s.toFixed(2)} s)`);
  }
  let msgs = [];
  for (let turn = 1; turn <= 5; turn++) {
    msgs.push({ role: 'user', content: `Question ${turn}: tell me something about the number ${turn * 7} and the sea, in detail, with examples.` });
    const r = await post('/v1/chat/completions', { messages: msgs, max_tokens: 48, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const content = [...r.text.matchAll(/"content":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`)).join('');
    const usage = /"prompt_tokens":(\d+).*"cached_tokens":(\d+)/.exec(r.text);
    console.log(`turn ${turn}: ttft ${r.ttft.toFixed(1)} ms, prompt ${usage[1]} tokens, cached ${usage[2]}`);
    msgs.push({ role: 'assistant', content });
  }
})();
