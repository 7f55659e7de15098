// schema_fuzz.js — structured outputs of `cinfer serve` checked with a real validator.
//
// Usage: node tests/server/schema_fuzz.js BASE_URL (json_schema | tools | random) [N]
// json_schema: many schemas x seeds, each with response_format json_schema at temperature 1
// (the demo model's random weights make the most varied replies: the best fuzz); every reply
// must finish "stop", parse, and pass ajv (draft 2020-12, ajv-formats) against its schema.
// tools: tools declared strict (tool_choice required / named / auto) on a server whose chat
// template frames tool calls: every call's arguments must pass ajv against the function's
// parameters. random: N schemas drawn at random from the supported keywords (and some
// that are not), one seeded request each: a 400 must be one line naming response_format;
// a reply that finishes "stop" must pass ajv (one cut by max_tokens is counted, not
// checked: random schemas may allow unbounded strings). ajv and ajv-formats come from
// .cache/npm (tests/server/setup_npm.sh).
// Prints one PASS or FAIL line per check, as tests/run.sh counts them.
'use strict';
const path = require('path');
const npm = path.join(__dirname, '../../.cache/npm/node_modules');
const Ajv2020 = require(path.join(npm, 'ajv/dist/2020')).default;
const addFormats = require(path.join(npm, 'ajv-formats')).default;

const [base, mode, seedsArg] = process.argv.slice(2);
const SEEDS = Number(seedsArg || 6);
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
let failed = 0;
const pass = (name) => console.log(`PASS ${name}`);
const fail = (name, why) => { failed++; console.log(`FAIL ${name}: ${String(why).replace(/\n/g, ' ').slice(0, 500)}`); };

const str = (extra = {}) => ({ type: 'string', maxLength: 12, ...extra });
const SCHEMAS = {
  person: { type: 'object', properties: { name: str({ minLength: 1 }), age: { type: 'integer', minimum: 0, maximum: 120 },
    email: { type: 'string', format: 'email', maxLength: 30 } }, required: ['name', 'age', 'email'], additionalProperties: false },
  types: { type: 'object', properties: { s: str(), i: { type: 'integer' }, n: { type: 'number' }, b: { type: 'boolean' }, z: { type: 'null' },
    u: { type: ['string', 'integer', 'null'], maxLength: 6 } }, required: ['s', 'i', 'n', 'b', 'z', 'u'], additionalProperties: false },
  enums: { type: 'object', properties: { color: { enum: ['red', 'green', 'blue', 7, null] }, k: { const: 'fixed' },
    size: { type: 'string', enum: ['S', 'M', 'L', 3] } }, required: ['color', 'k', 'size'], additionalProperties: false },
  arrays: { type: 'object', properties: { tags: { type: 'array', items: str({ maxLength: 5 }), minItems: 1, maxItems: 3 },
    pair: { type: 'array', prefixItems: [{ type: 'integer', minimum: -9, maximum: 9 }, { type: 'boolean' }], items: false, minItems: 2 } },
    required: ['tags', 'pair'], additionalProperties: false },
  optional: { type: 'object', properties: { a: { type: 'integer', maximum: 50 }, b: str({ maxLength: 4 }), c: { type: 'boolean' } },
    additionalProperties: false },
  lengths: { type: 'object', properties: { short: { type: 'string', minLength: 2, maxLength: 3 }, exact: { type: 'string', minLength: 4, maxLength: 4 } },
    required: ['short', 'exact'], additionalProperties: false },
  patterns: { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' }, hex: { type: 'string', pattern: '^#[0-9a-f]{6}$' },
    word: { type: 'string', pattern: 'ok', maxLength: 8 }, alt: { type: 'string', pattern: '^(yes|no|maybe)$' } },
    required: ['code', 'hex', 'word', 'alt'], additionalProperties: false },
  formats: { type: 'object', properties: { id: { type: 'string', format: 'uuid' }, day: { type: 'string', format: 'date' },
    at: { type: 'string', format: 'date-time' }, t: { type: 'string', format: 'time' } }, required: ['id', 'day', 'at', 't'], additionalProperties: false },
  numbers: { type: 'object', properties: { p: { type: 'number', minimum: 0, maximum: 1 }, x: { type: 'number', exclusiveMinimum: -2.5, exclusiveMaximum: 2.5 },
    k: { type: 'integer', minimum: 1000, maximum: 1010 }, neg: { type: 'integer', maximum: -5, minimum: -50 } }, required: ['p', 'x', 'k', 'neg'], additionalProperties: false },
  anyof: { type: 'object', properties: { shape: { anyOf: [
    { type: 'object', properties: { kind: { const: 'circle' }, r: { type: 'number', minimum: 0, maximum: 10 } }, required: ['kind', 'r'], additionalProperties: false },
    { type: 'object', properties: { kind: { const: 'rect' }, w: { type: 'integer', minimum: 0, maximum: 9 }, h: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['kind', 'w', 'h'], additionalProperties: false }] } },
    required: ['shape'], additionalProperties: false },
  oneof: { type: 'array', maxItems: 3, items: { oneOf: [
    { type: 'object', properties: { t: { const: 'a' }, v: { type: 'integer', maximum: 9, minimum: 0 } }, required: ['t', 'v'], additionalProperties: false },
    { type: 'object', properties: { t: { const: 'b' }, s: str({ maxLength: 3 }) }, required: ['t', 's'], additionalProperties: false },
    { type: 'string', maxLength: 3 }] } },
  allof: { allOf: [{ type: 'object', properties: { a: { type: 'integer', minimum: 0 } }, required: ['a'] },
    { properties: { a: { maximum: 3 }, b: { type: 'boolean' } }, required: ['b'], additionalProperties: false }] },
  list: { $defs: { node: { type: 'object', properties: { v: { type: 'integer', minimum: 0, maximum: 9 }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } },
    required: ['v', 'next'], additionalProperties: false } }, $ref: '#/$defs/node' },
  tree: { type: 'object', properties: { name: str({ maxLength: 4 }), kids: { type: 'array', maxItems: 2, items: { $ref: '#' } } },
    required: ['name'], additionalProperties: false },
  rootarr: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, minItems: 1, maxItems: 4 },
  rootstr: { type: 'string', format: 'date' },
  rootnum: { type: 'integer', minimum: 10, maximum: 20 },
  nested: { type: 'object', properties: { a: { type: 'object', properties: { b: { type: 'object', properties: { c: { type: 'array', maxItems: 2,
    items: { type: 'object', properties: { d: { enum: [1, 2, 3] } }, required: ['d'], additionalProperties: false } } }, required: ['c'], additionalProperties: false } },
    required: ['b'], additionalProperties: false } }, required: ['a'], additionalProperties: false },
};

async function post(body) {
  const r = await fetch(`${base}/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

async function pool(jobs, width) {
  let next = 0;
  const run = async () => { while (next < jobs.length) { const j = jobs[next++]; await j(); } };
  await Promise.all(Array.from({ length: width }, run));
}

async function jsonSchemaRound() {
  const jobs = [];
  let ok = 0, total = 0;
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    const validate = ajv.compile(schema);
    let bad = null, n = 0;
    for (let seed = 1; seed <= SEEDS; seed++) jobs.push(async () => {
      total++;
      const { status, body } = await post({ messages: [{ role: 'user', content: `Reply in JSON: ${name}` }], temperature: 1, seed, max_tokens: 700,
        response_format: { type: 'json_schema', json_schema: { name, strict: true, schema } } });
      const c = body.choices && body.choices[0];
      let why = null;
      if (status !== 200) why = `status ${status}: ${JSON.stringify(body).slice(0, 300)}`;
      else if (c.finish_reason !== 'stop') why = `seed ${seed}: finish ${c.finish_reason}: ${c.message.content.slice(0, 200)}`;
      else {
        let v;
        try { v = JSON.parse(c.message.content); } catch (e) { why = `seed ${seed}: not JSON: ${c.message.content.slice(0, 300)}`; }
        if (!why && !validate(v)) why = `seed ${seed}: ${ajv.errorsText(validate.errors)} in ${c.message.content.slice(0, 300)}`;
      }
      if (why) bad = bad || why; else { ok++; n++; }
    });
    SCHEMAS[name].__report = () => (bad ? fail(`json_schema ${name}: ${n}/${SEEDS} replies valid`, bad) : pass(`json_schema ${name}: ${SEEDS}/${SEEDS} replies parse and pass ajv`));
  }
  await pool(jobs, 4);
  for (const s of Object.values(SCHEMAS)) s.__report();
  (ok === total ? pass : (m) => fail(m, 'see above'))(`json_schema: ${ok}/${total} replies valid under ajv`);
}

const WEATHER = { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 10 }, unit: { enum: ['C', 'F'] },
  days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'unit', 'days'], additionalProperties: false };
const BOOK = { type: 'object', properties: { when: { type: 'string', format: 'date' }, seats: { type: 'array', items: { type: 'integer', minimum: 1, maximum: 40 }, minItems: 1, maxItems: 2 } },
  required: ['when', 'seats'], additionalProperties: false };
const TOOLS = [{ type: 'function', function: { name: 'get_weather', strict: true, parameters: WEATHER } },
  { type: 'function', function: { name: 'book', strict: true, parameters: BOOK } }];
const PARAMS = { get_weather: ajv.compile(WEATHER), book: ajv.compile(BOOK) };

async function toolsRound() {
  const cases = [['required', 'required'], ['named book', { type: 'function', function: { name: 'book' } }], ['auto', 'auto']];
  for (const [label, choice] of cases) {
    let calls = 0, bad = null, replies = 0;
    const jobs = [];
    for (let seed = 1; seed <= SEEDS; seed++) jobs.push(async () => {
      const { status, body } = await post({ messages: [{ role: 'user', content: 'Weather in Oslo, then book seats' }], temperature: 1, seed,
        max_tokens: label === 'auto' ? 120 : 350, tools: TOOLS, tool_choice: choice });
      if (status !== 200) { bad = bad || `status ${status}: ${JSON.stringify(body).slice(0, 300)}`; return; }
      replies++;
      const c = body.choices[0], tc = c.message.tool_calls || [];
      if (label !== 'auto' && (c.finish_reason !== 'tool_calls' || !tc.length)) { bad = bad || `seed ${seed}: finish ${c.finish_reason}, ${tc.length} calls: ${String(c.message.content).slice(0, 200)}`; return; }
      if (label === 'named book' && tc[0].function.name !== 'book') { bad = bad || `seed ${seed}: first call ${tc[0].function.name}`; return; }
      for (const call of tc) {
        const v = PARAMS[call.function.name];
        let a;
        try { a = JSON.parse(call.function.arguments); } catch (e) { bad = bad || `seed ${seed}: arguments not JSON: ${call.function.arguments}`; continue; }
        if (!v) { bad = bad || `seed ${seed}: unknown function ${call.function.name}`; continue; }
        if (!v(a)) bad = bad || `seed ${seed}: ${call.function.name} ${ajv.errorsText(v.errors)} in ${call.function.arguments}`;
        else calls++;
      }
    });
    await pool(jobs, 4);
    if (bad) fail(`strict tools, tool_choice ${label}: arguments valid`, bad);
    else if (label !== 'auto' && calls < SEEDS) fail(`strict tools, tool_choice ${label}`, `only ${calls} calls in ${replies} replies`);
    else pass(`strict tools, tool_choice ${label}: ${calls} calls in ${replies} replies, every one valid under ajv`);
  }
}

// random schemas: a small generator over the keywords (seeded, so a failure can be rerun)
let rs = 12345;
const rnd = (n) => { rs = (rs * 1103515245 + 12345) >>> 0; return (rs >>> 8) % n; };
const pick = (a) => a[rnd(a.length)];
function randSchema(d) {
  if (rnd(12) === 0) return true;
  const o = {};
  const n = rnd(4) + (d === 0 ? 1 : 0);
  for (let i = 0; i < n; i++) {
    const k = pick(['type', 'type', 'properties', 'required', 'additionalProperties', 'enum', 'const', 'items', 'prefixItems', 'minItems',
      'maxItems', 'anyOf', 'oneOf', 'allOf', '$ref', 'minLength', 'maxLength', 'pattern', 'format', 'minimum', 'maximum',
      'exclusiveMinimum', 'exclusiveMaximum', 'description', 'uniqueItems']);
    const sub = () => (d < 3 ? randSchema(d + 1) : {});
    const list = () => Array.from({ length: rnd(3) + 1 }, sub);
    switch (k) {
      case 'type': o.type = rnd(3) ? pick(['null', 'boolean', 'object', 'array', 'string', 'number', 'integer']) : [pick(['string', 'integer']), pick(['null', 'boolean', 'array'])]; break;
      case 'properties': o.properties = Object.fromEntries(Array.from({ length: rnd(3) }, () => ['p' + rnd(4), sub()])); break;
      case 'required': o.required = Array.from({ length: rnd(3) }, () => 'p' + rnd(4)); break;
      case 'additionalProperties': o.additionalProperties = rnd(2) ? false : sub(); break;
      case 'enum': o.enum = Array.from({ length: rnd(3) + 1 }, () => pick([1, 2.5, 'a', 'bc', null, true, [1], { x: 1 }])); break;
      case 'const': o.const = pick([0, 'k', false, null]); break;
      case 'items': o.items = rnd(4) ? sub() : false; break;
      case 'prefixItems': case 'anyOf': case 'oneOf': case 'allOf': o[k] = list(); break;
      case '$ref': o.$ref = pick(['#', '#/$defs/a', '#/properties/p0']); o.$defs = { a: { type: 'integer', maximum: 9, minimum: 0 } }; break;
      case 'pattern': o.pattern = pick(['^[a-c]{1,3}$', '^x(y|z)?$', '[0-9]', '^\\d{2}-\\w$']); break;
      case 'format': o.format = pick(['date', 'date-time', 'uuid', 'email', 'time']); break;
      case 'minLength': case 'maxLength': case 'minItems': case 'maxItems': o[k] = rnd(4); break;
      case 'uniqueItems': o.uniqueItems = true; break;
      case 'description': o.description = 'd'; break;
      default: o[k] = rnd(20) - 5;
    }
  }
  return o;
}

async function randomRound(count) {
  let ok = 0, refused = 0, cut = 0, bad = null, nbad = 0;
  const jobs = [];
  for (let i = 0; i < count; i++) {
    const schema = randSchema(0);
    jobs.push(async () => {
      const { status, body } = await post({ messages: [{ role: 'user', content: 'JSON please' }], temperature: 1, seed: i, max_tokens: 300,
        response_format: { type: 'json_schema', json_schema: { name: 'r', schema } } });
      if (status === 400) {
        const m = body.error && body.error.message;
        if (body.error.param !== 'response_format' || typeof m !== 'string' || m.includes('\n')) { nbad++; bad = bad || `400 without a one-line message on response_format: ${JSON.stringify(body)}`; }
        else refused++;
        return;
      }
      if (status !== 200) { nbad++; bad = bad || `status ${status} for ${JSON.stringify(schema)}: ${JSON.stringify(body).slice(0, 200)}`; return; }
      const c = body.choices[0];
      if (c.finish_reason === 'length') { cut++; return; }
      let v, why = null;
      try { v = JSON.parse(c.message.content); } catch (e) { why = 'not JSON'; }
      let validate = null;
      try { validate = ajv.compile(schema); } catch (e) { refused++; return; }      // a schema ajv itself refuses
      if (!why && !validate(v)) why = ajv.errorsText(validate.errors);
      if (why) { nbad++; bad = bad || `${why}: ${JSON.stringify(schema)} -> ${c.message.content.slice(0, 200)}`; } else ok++;
    });
  }
  await pool(jobs, 4);
  if (bad) fail(`random schemas: ${nbad} bad of ${count}`, bad);
  else if (ok < count / 4) fail('random schemas', `only ${ok} checked replies of ${count} (${refused} refused, ${cut} cut)`);
  else pass(`random schemas: ${ok} replies valid under ajv, ${refused} schemas refused with a 400, ${cut} cut by max_tokens (of ${count})`);
}

(async () => {
  try {
    if (mode === 'random') await randomRound(SEEDS);
    else if (mode === 'json_schema') await jsonSchemaRound();
    else if (mode === 'tools') await toolsRound();
    else fail('mode', `unknown mode ${mode}`);
  } catch (e) { fail(`${mode} round runs`, e && e.stack ? e.stack : e); }
  process.exit(failed ? 1 : 0);
})();
