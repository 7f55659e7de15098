// responses_client.js — the official `openai` npm client's Responses API (responses.create,
// responses.stream) against a running `cinfer serve` with the demo model.
//
// Usage: node tests/server/responses_client.js BASE_URL API_KEY MODE
//   basic  (the demo model's own template): string input, instructions and item input render
//          the prompt their chat completions form renders (same token count) and give the
//          same greedy / seeded text; previous_response_id (the stored turn continues, its
//          prefix comes from the cache; store: false and unknown ids are 400);
//          responses.stream events in order with consecutive sequence numbers, deltas equal
//          to the final text and to the non-streamed reply; finalResponse; text.format
//          json_object; json_schema answered exactly as chat's response_format answers it;
//          errors as the client's typed exceptions naming the field.
//   tools  (a Qwen3 template): flat function tools, tool_choice, a function_call +
//          function_call_output history rendered as its chat form, a forced call.
//   think  (a template that opens <think>): the reply is a reasoning item (summary text),
//          streamed as reasoning_summary_text events.
// Prints one PASS or FAIL line per check, as tests/run.sh counts them.
'use strict';
const path = require('path');
const OpenAI = require(path.join(__dirname, '../../.cache/npm/node_modules/openai'));

const [base, key, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: key || 'none', maxRetries: 0, timeout: 30000 });
const MODEL = process.env.MODEL || 'demo';
const pass = (name) => console.log(`PASS ${name}`);
const fail = (name, why) => console.log(`FAIL ${name}: ${String(why).replace(/\n/g, ' ').slice(0, 500)}`);
async function check(name, fn) {
  try { const r = await fn(); if (r === true || r === undefined) pass(name); else fail(name, r); } catch (e) { fail(name, e && e.stack ? e.stack : e); }
}
async function expectError(fn, status, param) {
  try { await fn(); return 'no error'; } catch (e) {
    if (!(e instanceof OpenAI.APIError)) return `not an APIError: ${e}`;
    if (e.status !== status) return `status ${e.status}, want ${status}: ${e.message}`;
    if (param !== undefined && e.param !== param) return `param ${e.param}, want ${param}: ${e.message}`;
    return true;
  }
}
const chat = (messages, extra = {}) => client.chat.completions.create({ model: MODEL, messages, max_tokens: 16, temperature: 0, ...extra });
const create = (req) => client.responses.create({ model: MODEL, max_output_tokens: 16, temperature: 0, ...req });
const textOf = (r) => r.output.filter((o) => o.type === 'message').map((o) => o.content.map((c) => c.text).join('')).join('');

// Streams req through responses.stream; returns the events and the final response.
async function streamed(req) {
  const stream = client.responses.stream({ model: MODEL, max_output_tokens: 16, temperature: 0, ...req });
  const events = [];
  for await (const ev of stream) events.push(ev);
  return { events, final: await stream.finalResponse() };
}

// The event types in order, with runs of one delta type folded into "<type>*".
function shape(events) {
  const out = [];
  for (const e of events) {
    const t = e.type.replace(/^response\./, '');
    if (t.endsWith('.delta') && out.length && out[out.length - 1] === `${t}*`) continue;
    out.push(t.endsWith('.delta') ? `${t}*` : t);
  }
  return out.join(' ');
}
const seqOk = (events) => events.every((e, i) => e.sequence_number === i) || `sequence numbers ${events.map((e) => e.sequence_number)}`;

async function basic() {
  let r1 = null;
  await check('responses.create: string input, same greedy text and prompt as chat', async () => {
    r1 = await create({ input: 'Tell me about the sea.' });
    const c = await chat([{ role: 'user', content: 'Tell me about the sea.' }]);
    if (r1.object !== 'response' || !r1.id.startsWith('resp_') || !['completed', 'incomplete'].includes(r1.status)) return JSON.stringify(r1);
    if (r1.output[0].type !== 'message' || r1.output[0].role !== 'assistant' || r1.output[0].content[0].type !== 'output_text') return JSON.stringify(r1.output);
    if (r1.output_text !== c.choices[0].message.content || !r1.output_text.length) return `'${r1.output_text}' vs chat '${c.choices[0].message.content}'`;
    const u = r1.usage;
    if (u.input_tokens !== c.usage.prompt_tokens || u.output_tokens !== c.usage.completion_tokens || u.total_tokens !== u.input_tokens + u.output_tokens) return JSON.stringify(u);
    if (r1.status === 'incomplete' && r1.incomplete_details.reason !== 'max_output_tokens') return JSON.stringify(r1.incomplete_details);
    if (r1.model !== MODEL || r1.max_output_tokens !== 16 || r1.temperature !== 0) return 'echoed fields';
  });

  await check('responses.create: instructions are a system message', async () => {
    const r = await create({ instructions: 'Answer in one line.', input: 'Hi' });
    const c = await chat([{ role: 'system', content: 'Answer in one line.' }, { role: 'user', content: 'Hi' }]);
    if (r.usage.input_tokens !== c.usage.prompt_tokens || r.output_text !== c.choices[0].message.content) return `${r.usage.input_tokens} '${r.output_text}' vs ${c.usage.prompt_tokens} '${c.choices[0].message.content}'`;
    if (r.instructions !== 'Answer in one line.') return `instructions ${r.instructions}`;
  });

  await check('responses.create: item input (input_text / output_text parts, developer role)', async () => {
    const input = [
      { role: 'developer', content: 'Be kind.' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello' }, { type: 'input_text', text: 'again' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi!', annotations: [] }] },
      { role: 'user', content: 'How are you?' },
    ];
    const r = await create({ input });
    const c = await chat([{ role: 'system', content: 'Be kind.' }, { role: 'user', content: 'Hello\nagain' }, { role: 'assistant', content: 'Hi!' }, { role: 'user', content: 'How are you?' }]);
    if (r.usage.input_tokens !== c.usage.prompt_tokens || r.output_text !== c.choices[0].message.content) return `${r.usage.input_tokens} vs ${c.usage.prompt_tokens}`;
  });

  await check('seeded sampling (temperature, top_p, seed) equals chat with the same seed', async () => {
    const opts = { temperature: 0.9, top_p: 0.95, seed: 4242 };
    const r = await create({ input: 'A story about the moon', ...opts });
    const r2 = await create({ input: 'A story about the moon', ...opts });
    const c = await chat([{ role: 'user', content: 'A story about the moon' }], opts);
    if (r.output_text !== r2.output_text) return `not repeatable: '${r.output_text}' vs '${r2.output_text}'`;
    if (r.output_text !== c.choices[0].message.content) return `'${r.output_text}' vs chat '${c.choices[0].message.content}'`;
  });

  await check('previous_response_id continues the stored conversation (from the cache)', async () => {
    const r2 = await create({ previous_response_id: r1.id, input: 'And the mountains?', max_output_tokens: 8 });
    const c = await chat([{ role: 'user', content: 'Tell me about the sea.' }, { role: 'assistant', content: r1.output_text }, { role: 'user', content: 'And the mountains?' }], { max_tokens: 8 });
    if (r2.previous_response_id !== r1.id) return `previous_response_id ${r2.previous_response_id}`;
    if (r2.usage.input_tokens !== c.usage.prompt_tokens || r2.output_text !== c.choices[0].message.content) return `${r2.usage.input_tokens} '${r2.output_text}' vs chat ${c.usage.prompt_tokens} '${c.choices[0].message.content}'`;
    if (!(r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens)) return `cached ${r2.usage.input_tokens_details.cached_tokens} < ${r1.usage.input_tokens}`;
    const r3 = await create({ previous_response_id: r2.id, input: 'Thanks.', max_output_tokens: 4 });
    const c3 = await chat([{ role: 'user', content: 'Tell me about the sea.' }, { role: 'assistant', content: r1.output_text }, { role: 'user', content: 'And the mountains?' },
      { role: 'assistant', content: r2.output_text }, { role: 'user', content: 'Thanks.' }], { max_tokens: 4 });
    if (r3.usage.input_tokens !== c3.usage.prompt_tokens) return `third turn ${r3.usage.input_tokens} vs ${c3.usage.prompt_tokens}`;
  });

  await check('previous_response_id: store false is not kept; unknown ids are 400', async () => {
    const r = await create({ input: 'Forget me', store: false, max_output_tokens: 2 });
    if (r.store !== false) return 'store not echoed';
    const e1 = await expectError(() => create({ previous_response_id: r.id, input: 'x' }), 400, 'previous_response_id');
    if (e1 !== true) return e1;
    return expectError(() => create({ previous_response_id: 'resp_does_not_exist', input: 'x' }), 400, 'previous_response_id');
  });

  await check('responses.stream: events in order, sequence numbers, deltas = final = non-streamed', async () => {
    const req = { input: 'What is 2+2?', max_output_tokens: 200 };
    const plain = await create(req);
    const { events, final } = await streamed(req);
    const want = 'created in_progress output_item.added content_part.added output_text.delta* output_text.done content_part.done output_item.done completed';
    if (shape(events) !== want) return `events: ${shape(events)}`;
    const s = seqOk(events);
    if (s !== true) return s;
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    const done = events.find((e) => e.type === 'response.output_text.done');
    if (plain.status !== 'completed') return `non-streamed status ${plain.status} (the prompt is chosen to end by itself)`;
    if (text !== plain.output_text || done.text !== text) return `deltas '${text}' done '${done.text}' plain '${plain.output_text}'`;
    if (final.status !== 'completed' || textOf(final) !== text || final.usage.output_tokens !== plain.usage.output_tokens) return `final ${JSON.stringify(final).slice(0, 300)}`;
    const ids = new Set(events.filter((e) => e.item_id).map((e) => e.item_id));
    if (ids.size !== 1 || !ids.has(final.output[0].id)) return `item ids ${[...ids]}`;
    if (events[0].response.status !== 'in_progress' || events[0].response.id !== final.id) return 'response.created';
  });

  await check('responses.create stream: true, cut by max_output_tokens: response.incomplete last', async () => {
    const st = await client.responses.create({ model: MODEL, input: 'Tell me about the sea.', max_output_tokens: 5, temperature: 0, stream: true });
    const events = [];
    for await (const ev of st) events.push(ev);
    const last = events[events.length - 1];
    if (last.type !== 'response.incomplete' || last.response.status !== 'incomplete' || last.response.incomplete_details.reason !== 'max_output_tokens') return `last ${JSON.stringify(last).slice(0, 300)}`;
    if (last.response.usage.output_tokens !== 5) return `usage ${JSON.stringify(last.response.usage)}`;
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    const plain = await create({ input: 'Tell me about the sea.', max_output_tokens: 5 });
    if (text !== plain.output_text || last.response.output[0].status !== 'incomplete') return `'${text}' vs '${plain.output_text}'`;
    return seqOk(events);
  });

  await check('text.format json_object: the reply is a JSON object (or its start when cut)', async () => {
    const r = await create({ input: 'A dog as JSON', max_output_tokens: 40, temperature: 1, seed: 3, text: { format: { type: 'json_object' } } });
    const t = r.output_text.trim();
    if (r.status === 'completed') { const v = JSON.parse(t); return (v && typeof v === 'object' && !Array.isArray(v)) || t; }
    return t.startsWith('{') || t;
  });

  await check('text.format json_schema is answered as chat answers response_format json_schema', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'], additionalProperties: false };
    let rr, cc;
    try { rr = await create({ input: 'A dog', text: { format: { type: 'json_schema', name: 'dog', schema, strict: true } } }); } catch (e) { rr = e; }
    try { cc = await chat([{ role: 'user', content: 'A dog' }], { response_format: { type: 'json_schema', json_schema: { name: 'dog', schema, strict: true } } }); } catch (e) { cc = e; }
    if (cc instanceof OpenAI.APIError) {
      if (!(rr instanceof OpenAI.APIError) || rr.status !== cc.status) return `responses ${rr && rr.status} vs chat ${cc.status}`;
      if (rr.param !== 'text.format' || rr.error.message !== cc.error.message.replace(/'response_format/g, "'text.format")) return `${rr.param}: ${rr.error.message} vs ${cc.error.message}`;
      return true;
    }
    if (rr instanceof Error) return `responses failed where chat did not: ${rr.message}`;
    return rr.output_text === cc.choices[0].message.content || `'${rr.output_text}' vs chat '${cc.choices[0].message.content}'`;
  });

  await check('error: unknown model is 404', () => expectError(() => create({ model: 'gpt-5', input: 'x' }), 404, 'model'));
  await check('error: empty input is 400', () => expectError(() => create({ input: [] }), 400, 'input'));
  await check('error: an image part is 400', () => expectError(() => create({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png', detail: 'auto' }] }] }), 400, 'input[0].content'));
  await check('error: a hosted tool is 400', () => expectError(() => create({ input: 'x', tools: [{ type: 'web_search' }] }), 400, 'tools[0]'));
  await check('error: max_output_tokens beyond the context is 400', () => expectError(() => create({ input: 'x', max_output_tokens: 1 << 20 }), 400, 'max_output_tokens'));
  await check('error: temperature of the wrong type is 400', () => expectError(() => create({ input: 'x', temperature: 'hot' }), 400, 'temperature'));
  await check('error: a bad key is 401', async () => {
    const bad = new OpenAI({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
    try { await bad.responses.create({ model: MODEL, input: 'x' }); return 'no error'; } catch (e) { return e instanceof OpenAI.AuthenticationError || `got ${e}`; }
  });
}

const TOOLS = [
  { type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: true },
  { type: 'function', name: 'now', description: 'The time', parameters: { type: 'object', properties: {} }, strict: false },
];
const CHAT_TOOLS = TOOLS.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } }));

async function tools() {
  await check('tools: flat function tools render as chat tools', async () => {
    const r = await create({ input: 'Weather in Paris?', tools: TOOLS, max_output_tokens: 4 });
    const c = await chat([{ role: 'user', content: 'Weather in Paris?' }], { tools: CHAT_TOOLS, max_tokens: 4 });
    const none = await create({ input: 'Weather in Paris?', max_output_tokens: 4 });
    if (r.usage.input_tokens !== c.usage.prompt_tokens || !(r.usage.input_tokens > none.usage.input_tokens)) return `${r.usage.input_tokens} vs chat ${c.usage.prompt_tokens} (no tools ${none.usage.input_tokens})`;
    if (r.tools.length !== 2 || r.tools[0].name !== 'get_weather') return 'tools not echoed';
  });

  await check('tools: function_call + function_call_output round trip renders as chat tool messages', async () => {
    const input = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temp": 21}' },
    ];
    const r = await create({ input, tools: TOOLS, max_output_tokens: 8 });
    const c = await chat([{ role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }], { tools: CHAT_TOOLS, max_tokens: 8 });
    if (r.usage.input_tokens !== c.usage.prompt_tokens) return `${r.usage.input_tokens} vs chat ${c.usage.prompt_tokens}`;
    const m = c.choices[0].message;
    if (m.tool_calls) {
      const calls = r.output.filter((o) => o.type === 'function_call');
      if (calls.length !== m.tool_calls.length || calls[0].name !== m.tool_calls[0].function.name || calls[0].arguments !== m.tool_calls[0].function.arguments) return JSON.stringify(r.output);
    } else if (r.output_text !== m.content) return `'${r.output_text}' vs chat '${m.content}'`;
  });

  await check('tools: tool_choice naming a function starts its call (a function_call item, or the call text when cut)', async () => {
    const r = await create({ input: 'Weather?', tools: TOOLS, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 24 });
    const calls = r.output.filter((o) => o.type === 'function_call');
    if (calls.length) return (calls[0].name === 'get_weather' && typeof calls[0].arguments === 'string' && calls[0].call_id && calls[0].status === 'completed') || JSON.stringify(calls);
    return r.output_text.startsWith('<tool_call>\n{"name": "get_weather", "arguments": ') || `text '${r.output_text}'`;
  });

  await check('tools: streamed with tool_choice required, well formed', async () => {
    const st = await client.responses.create({ model: MODEL, input: 'Weather?', tools: TOOLS, tool_choice: 'required', max_output_tokens: 24, temperature: 0, stream: true });
    const events = [];
    for await (const ev of st) events.push(ev);
    const last = events[events.length - 1];
    if (!['response.completed', 'response.incomplete'].includes(last.type)) return shape(events);
    const s = seqOk(events);
    if (s !== true) return s;
    for (const it of last.response.output) {
      if (it.type === 'function_call') {
        const done = events.find((e) => e.type === 'response.function_call_arguments.done' && e.item_id === it.id);
        if (!done || done.arguments !== it.arguments) return `arguments events for ${it.id}`;
      } else if (it.type === 'message') {
        const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
        if (text !== it.content[0].text) return `deltas '${text}' vs '${it.content[0].text}'`;
      }
    }
  });

  await check('tools: bad tool_choice names are 400', () => expectError(() => create({ input: 'x', tools: TOOLS, tool_choice: { type: 'function', name: 'nope' } }), 400, 'tool_choice'));
}

async function think() {
  await check('reasoning: the <think> text is a reasoning item with a summary', async () => {
    const r = await create({ input: 'Why is the sky blue?', max_output_tokens: 12 });
    const rs = r.output[0];
    if (rs.type !== 'reasoning' || !rs.id.startsWith('rs_') || rs.summary.length !== 1 || rs.summary[0].type !== 'summary_text' || !rs.summary[0].text.length) return JSON.stringify(r.output);
    if (r.output[1].type !== 'message') return 'no message after the reasoning';
    if (!(r.usage.output_tokens_details.reasoning_tokens > 0)) return JSON.stringify(r.usage);
    const c = await chat([{ role: 'user', content: 'Why is the sky blue?' }], { max_tokens: 12 });
    return rs.summary[0].text === c.choices[0].message.reasoning_content || `'${rs.summary[0].text}' vs chat '${c.choices[0].message.reasoning_content}'`;
  });

  await check('reasoning: streamed as reasoning_summary events, deltas = the summary', async () => {
    const st = await client.responses.create({ model: MODEL, input: 'Why is the sky blue?', max_output_tokens: 12, temperature: 0, stream: true });
    const events = [];
    for await (const ev of st) events.push(ev);
    const want = 'created in_progress output_item.added reasoning_summary_part.added reasoning_summary_text.delta* reasoning_summary_text.done reasoning_summary_part.done output_item.done';
    if (!shape(events).startsWith(want)) return shape(events);
    const s = seqOk(events);
    if (s !== true) return s;
    const text = events.filter((e) => e.type === 'response.reasoning_summary_text.delta').map((e) => e.delta).join('');
    const last = events[events.length - 1];
    return text === last.response.output[0].summary[0].text || `'${text}' vs '${last.response.output[0].summary[0].text}'`;
  });
}

(async () => {
  if (mode === 'tools') await tools();
  else if (mode === 'think') await think();
  else await basic();
})();
