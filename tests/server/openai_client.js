// openai_client.js — the official `openai` npm client against a running `cinfer serve`.
//
// Usage: node tests/server/openai_client.js BASE_URL API_KEY
// (the client comes from .cache/npm, installed by tests/server/setup_npm.sh). Prints one
// PASS or FAIL line per check, as tests/run.sh counts them. Checks: models, chat (plain,
// streamed with usage, stop strings, logprobs), completions (plain and streamed), errors
// as the client's typed exceptions (unknown model, empty messages, wrong types, a bad key),
// prefix reuse on a second chat turn (cached_tokens), 8 seeded requests at once identical
// to the same requests run alone, and a load round: 16 streaming clients x 4 requests,
// each complete and well formed, the seeded ones equal to their solo runs.
'use strict';
const path = require('path');
const OpenAI = require(path.join(__dirname, '../../.cache/npm/node_modules/openai'));

const [base, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 30000 });
const MODEL = 'demo';
let failed = 0;
const pass = (name) => console.log(`PASS ${name}`);
const fail = (name, why) => { failed++; console.log(`FAIL ${name}: ${String(why).replace(/\n/g, ' ').slice(0, 400)}`); };
async function check(name, fn) {
  try { const r = await fn(); if (r === true || r === undefined) pass(name); else fail(name, r); } catch (e) { fail(name, e && e.stack ? e.stack : e); }
}
const chatReq = (content, extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 16, temperature: 0, ...extra });

async function streamChat(req) {
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta && c.delta.role) role = c.delta.role;
      if (c.delta && typeof c.delta.content === 'string') text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, chunks, role };
}

async function expectError(req, status, param, fn = (r) => client.chat.completions.create(r)) {
  try { await fn(req); return 'no error'; } catch (e) {
    if (!(e instanceof OpenAI.APIError)) return `not an APIError: ${e}`;
    if (e.status !== status) return `status ${e.status}, want ${status}: ${e.message}`;
    if (param !== undefined && e.param !== param) return `param ${e.param}, want ${param}: ${e.message}`;
    return true;
  }
}

(async () => {
  await check('models list', async () => {
    const ms = await client.models.list();
    const ids = ms.data.map((m) => m.id);
    return ids.includes(MODEL) || `ids ${ids}`;
  });

  let plain = null;
  await check('chat completion', async () => {
    plain = await client.chat.completions.create(chatReq('Tell me a story about a cat.'));
    const c = plain.choices[0];
    if (plain.object !== 'chat.completion' || c.message.role !== 'assistant' || typeof c.message.content !== 'string') return JSON.stringify(plain);
    if (!c.message.content.length) return 'empty content';
    if (!['stop', 'length'].includes(c.finish_reason)) return `finish ${c.finish_reason}`;
    const u = plain.usage;
    if (!(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens)) return JSON.stringify(u);
    if (typeof u.prompt_tokens_details.cached_tokens !== 'number') return 'no cached_tokens';
  });

  await check('chat stream equals non-stream, with usage', async () => {
    const s = await streamChat(chatReq('Tell me a story about a cat.'));
    if (s.role !== 'assistant') return `role ${s.role}`;
    if (!plain || s.text !== plain.choices[0].message.content) return `stream '${s.text}' vs '${plain && plain.choices[0].message.content}'`;
    if (s.finish !== plain.choices[0].finish_reason) return `finish ${s.finish}`;
    if (!s.usage || s.usage.completion_tokens !== plain.usage.completion_tokens) return `usage ${JSON.stringify(s.usage)}`;
  });

  await check('chat stop string', async () => {
    const full = plain.choices[0].message.content;
    const cut = full.indexOf(' ', 3);
    if (cut < 0) return `no space in '${full}'`;
    const stop = full.slice(cut, cut + 3);
    const r = await client.chat.completions.create(chatReq('Tell me a story about a cat.', { stop: [stop] }));
    const t = r.choices[0].message.content;
    if (t !== full.slice(0, full.indexOf(stop))) return `'${t}' vs '${full}' stop '${stop}'`;
    if (r.choices[0].finish_reason !== 'stop') return `finish ${r.choices[0].finish_reason}`;
    const s = await streamChat(chatReq('Tell me a story about a cat.', { stop: stop }));
    if (s.text !== t || s.finish !== 'stop') return `stream '${s.text}' ${s.finish}`;
  });

  await check('chat logprobs', async () => {
    const r = await client.chat.completions.create(chatReq('Hello', { logprobs: true, top_logprobs: 3, max_tokens: 6 }));
    const lp = r.choices[0].logprobs.content;
    if (lp.length !== r.usage.completion_tokens) return `${lp.length} entries for ${r.usage.completion_tokens} tokens`;
    for (const e of lp) {
      if (typeof e.token !== 'string' || !(e.logprob <= 0) || e.top_logprobs.length !== 3) return JSON.stringify(e);
      if (e.top_logprobs[0].logprob < e.logprob - 1e-6) return `greedy token is not the top one: ${JSON.stringify(e)}`;
    }
  });

  await check('completions plain and streamed', async () => {
    const req = { model: MODEL, prompt: 'The old man', max_tokens: 16, temperature: 0 };
    const r = await client.completions.create(req);
    const t = r.choices[0].text;
    if (r.object !== 'text_completion' || typeof t !== 'string' || !t.length) return JSON.stringify(r);
    const st = await client.completions.create({ ...req, stream: true });
    let s = '', fin = null;
    for await (const ch of st) for (const c of ch.choices) { s += c.text; if (c.finish_reason) fin = c.finish_reason; }
    if (s !== t || fin !== r.choices[0].finish_reason) return `stream '${s}' ${fin} vs '${t}' ${r.choices[0].finish_reason}`;
  });

  await check('tools round trip accepted (tool call + tool result in the history)', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const messages = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    ];
    const r = await client.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 8, temperature: 0 });
    const c = r.choices[0];
    if (c.message.role !== 'assistant' || !['stop', 'length', 'tool_calls'].includes(c.finish_reason)) return JSON.stringify(r);
    if (c.finish_reason === 'tool_calls' && !(c.message.tool_calls && c.message.tool_calls.length)) return 'tool_calls finish without calls';
  });

  await check('error: unknown model is 404', () => expectError({ ...chatReq('hi'), model: 'gpt-4o' }, 404, 'model'));
  await check('error: empty messages is 400', () => expectError({ model: MODEL, messages: [] }, 400, 'messages'));
  await check('error: temperature of the wrong type is 400', () => expectError(chatReq('hi', { temperature: 'hot' }), 400, 'temperature'));
  await check('error: top_p out of range is 400', () => expectError(chatReq('hi', { top_p: 7 }), 400, 'top_p'));
  await check('error: max_tokens beyond the context is 400', () => expectError(chatReq('hi', { max_tokens: 1 << 20 }), 400, 'max_tokens'));
  await check('error: completions without a prompt is 400', () => expectError({ model: MODEL }, 400, 'prompt', (r) => client.completions.create(r)));
  await check('error: a bad API key is 401', async () => {
    const bad = new OpenAI({ baseURL: base, apiKey: 'wrong-key', maxRetries: 0 });
    try { await bad.models.list(); return 'no error'; } catch (e) { return e instanceof OpenAI.AuthenticationError || `got ${e}`; }
  });

  await check('prefix reuse: second turn has cached_tokens', async () => {
    const m1 = [{ role: 'user', content: 'What do you think about the sea and its long story?' }];
    const r1 = await client.chat.completions.create({ model: MODEL, messages: m1, max_tokens: 16, temperature: 0 });
    const m2 = [...m1, { role: 'assistant', content: r1.choices[0].message.content }, { role: 'user', content: 'And the mountains?' }];
    const r2 = await client.chat.completions.create({ model: MODEL, messages: m2, max_tokens: 8, temperature: 0 });
    const c = r2.usage.prompt_tokens_details.cached_tokens;
    return c >= r1.usage.prompt_tokens || `cached ${c} of ${r2.usage.prompt_tokens} (turn 1 prompt ${r1.usage.prompt_tokens})`;
  });

  // determinism: seeded sampling, alone then 8 at once
  const seeded = (i) => chatReq(`Story number ${i % 3} about the moon`, { temperature: 0.9, top_p: 0.95, seed: 1000 + i, max_tokens: 12 });
  const solo = [];
  await check('8 concurrent seeded requests equal their solo runs', async () => {
    for (let i = 0; i < 8; i++) solo.push((await client.chat.completions.create(seeded(i))).choices[0].message.content);
    const par = await Promise.all([...Array(8).keys()].map((i) => client.chat.completions.create(seeded(i))));
    for (let i = 0; i < 8; i++) if (par[i].choices[0].message.content !== solo[i]) return `request ${i}: '${par[i].choices[0].message.content}' vs solo '${solo[i]}'`;
    if (new Set(solo).size < 2) return 'all seeds gave the same text';
  });

  await check('load: 16 streaming clients x 4 requests, complete and deterministic', async () => {
    const errors = [];
    const worker = async (w) => {
      for (let k = 0; k < 4; k++) {
        const i = (w + k) % 8;
        const s = await streamChat(seeded(i));
        if (!s.finish || !s.usage || s.usage.completion_tokens < 1) errors.push(`client ${w} req ${k}: incomplete ${JSON.stringify(s)}`);
        else if (s.text !== solo[i]) errors.push(`client ${w} req ${k}: '${s.text}' vs solo '${solo[i]}'`);
      }
    };
    await Promise.all([...Array(16).keys()].map(worker));
    return errors.length ? errors.slice(0, 3).join('; ') : true;
  });

  await check('after the load, greedy output is unchanged (caches reused correctly)', async () => {
    const r = await client.chat.completions.create(chatReq('Tell me a story about a cat.'));
    return r.choices[0].message.content === plain.choices[0].message.content || `'${r.choices[0].message.content}' vs '${plain.choices[0].message.content}'`;
  });

  process.exit(failed ? 1 : 0);
})();
