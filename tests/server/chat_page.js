// chat_page.js — the chat page of `cinfer serve` (GET /) in a real headless Chromium, driven
// by playwright-core (from .cache/npm, tests/server/setup_npm.sh).
//
// Usage: node tests/server/chat_page.js CHROMIUM URL_PLAIN URL_THINK KEY
//   URL_PLAIN: a server with the demo model and no key; URL_THINK: one whose template opens
//   <think> (every reply is reasoning) and that wants KEY.
// Checks: the model's name from /v1/models; a typed message streams in (several updates)
// and ends as the server's own non-streamed greedy reply; the next turn sends the whole
// conversation; Stop aborts a long reply (the text stops, the server's sequence is
// cancelled, the buttons come back); New chat forgets the conversation; a server error is
// shown readably and its turn is dropped; the page fetches nothing but its own origin;
// a 401 asks for the key, which then works; reasoning is shown folded in <details>.
// Prints one PASS or FAIL line per check.
'use strict';
const path = require('path');
const { chromium } = require(path.join(__dirname, '../../.cache/npm/node_modules/playwright-core'));

const [chrome, urlPlain, urlThink, key] = process.argv.slice(2);
const pass = (name) => console.log(`PASS ${name}`);
const fail = (name, why) => console.log(`FAIL ${name}: ${String(why).replace(/\n/g, ' ').slice(0, 500)}`);
async function check(name, fn) {
  try { const r = await fn(); if (r === true || r === undefined) pass(name); else fail(name, r); } catch (e) { fail(name, (e && e.stack ? e.stack : e) + (e && e.cause ? ` (cause: ${e.cause})` : "")); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function metric(base, name) {
  const t = await (await fetch(`${base}/metrics`)).text();
  const line = t.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : NaN;
}

// Sends text through the page's composer and waits for the reply to end; returns the last
// assistant message's {text, finish, updates} (updates: content changes seen while it streamed).
async function turn(page, text, { wait = true } = {}) {
  await page.evaluate(() => {
    window.__updates = 0;
    const obs = new MutationObserver(() => { window.__updates++; });
    const watch = () => {
      const all = document.querySelectorAll('.msg.assistant .content');
      if (all.length) obs.observe(all[all.length - 1], { childList: true, characterData: true, subtree: true });
    };
    new MutationObserver(watch).observe(document.getElementById('messages'), { childList: true });
  });
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
  if (!wait) return null;
  await page.waitForFunction(() => { const m = document.querySelectorAll('.msg.assistant'); return m.length && m[m.length - 1].dataset.finish; }, null, { timeout: 30000 });
  return page.evaluate(() => {
    const m = document.querySelectorAll('.msg.assistant');
    const last = m[m.length - 1];
    return { text: last.querySelector('.content').textContent, finish: last.dataset.finish, updates: window.__updates };
  });
}

async function chatRequest(base, body, headers = {}) {
  const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return res.json();
}

(async () => {
  const browser = await chromium.launch({ executablePath: chrome, args: ['--no-sandbox'], timeout: 60000 });
  const page = await browser.newPage();
  const origins = new Set();
  const sent = [];                               // bodies of the page's chat requests
  page.on('request', (r) => {
    origins.add(new URL(r.url()).origin);
    if (r.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(r.postData()));
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));

  await check('the page loads and names the model', async () => {
    await page.goto(urlPlain + '/');
    await page.click('details.options summary');          // the sampling fields are folded
    await page.waitForFunction(() => document.getElementById('model').textContent === 'demo', null, { timeout: 10000 });
    return (await page.title()).startsWith('demo') || `title ${await page.title()}`;
  });

  let first = null;
  await check('a typed message streams in and ends as the server\'s greedy reply', async () => {
    await page.fill('#temperature', '0');
    await page.fill('#max_tokens', '60');
    // this request only: 200 tokens past EOS, so that the reply surely spans several reads
    let asked = null;
    await page.route('**/v1/chat/completions', async (route) => {
      asked = JSON.parse(route.request().postData());
      await route.continue({ postData: JSON.stringify({ ...asked, max_tokens: 200, ignore_eos: true }) });
    });
    first = await turn(page, 'Once upon a time');
    await page.unroute('**/v1/chat/completions');
    const user = await page.textContent('.msg.user .content');
    if (user !== 'Once upon a time') return `user bubble '${user}'`;
    if (!asked.stream || asked.model !== 'demo' || asked.temperature !== 0 || asked.max_tokens !== 60) return `request ${JSON.stringify(asked)}`;
    const want = await chatRequest(urlPlain, { messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: 200, ignore_eos: true });
    if (first.text !== want.choices[0].message.content || !first.text.length) return `page '${first.text}' vs server '${want.choices[0].message.content}'`;
    if (first.updates < 2) return `the text arrived in ${first.updates} update(s), not streamed`;
    if (first.finish !== 'length') return `finish ${first.finish}`;
    return (await page.textContent('.msg.assistant .note')) === '(cut at the token limit)' || 'no note on a cut reply';
  });

  await check('Stop aborts a long reply; the server cancels it; the page is usable again', async () => {
    // a fresh conversation and, for this request only, 3000 tokens past EOS (server P has an
    // 8192-token context): something that surely still runs when Stop is clicked
    await page.click('#new');
    await page.route('**/v1/chat/completions', async (route) => {
      const b = JSON.parse(route.request().postData());
      await route.continue({ postData: JSON.stringify({ ...b, max_tokens: 3000, ignore_eos: true }) });
    });
    const d0 = await metric(urlPlain, 'cinfer_client_disconnects_total');
    await turn(page, 'Keep talking', { wait: false });
    await page.waitForFunction(() => { const m = document.querySelectorAll('.msg.assistant .content'); return m.length === 1 && m[0].textContent.length > 10; }, null, { timeout: 20000 });
    if (!(await page.isEnabled('#stop')) || await page.isEnabled('#send'))
      return `Stop not enabled (or Send not disabled) while running: ${await page.evaluate(() => JSON.stringify({ f: document.querySelector('.msg.assistant').dataset.finish, n: document.querySelector('.msg.assistant .content').textContent.length, e: document.getElementById('error').textContent }))}`;
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[0].dataset.finish === 'stopped', null, { timeout: 5000 });
    const len1 = (await page.textContent('.msg.assistant .content')).length;
    await sleep(600);
    const len2 = (await page.textContent('.msg.assistant .content')).length;
    if (len1 !== len2) return `text still growing after Stop: ${len1} -> ${len2}`;
    const note = await page.textContent('.msg.assistant .note');
    if (note !== '(stopped)') return `note '${note}'`;
    if (await page.isEnabled('#stop') || !(await page.isEnabled('#send'))) return 'buttons not restored';
    let ok = false;
    for (let i = 0; i < 40 && !ok; i++) {
      ok = (await metric(urlPlain, 'cinfer_active_sequences')) === 0 && (await metric(urlPlain, 'cinfer_client_disconnects_total')) > d0;
      if (!ok) await sleep(100);
    }
    await page.unroute('**/v1/chat/completions');
    return ok || 'the server still runs the sequence (or saw no disconnect)';
  });

  await check('the next turn sends the whole conversation, the stopped reply included', async () => {
    const stopped = await page.textContent('.msg.assistant .content');
    await page.fill('#max_tokens', '8');
    await turn(page, 'Thanks');
    const m = sent[sent.length - 1].messages;
    const roles = m.map((x) => x.role).join(',');
    if (roles !== 'user,assistant,user') return `roles ${roles}`;
    if (m[0].content !== 'Keep talking' || m[1].content !== stopped || !stopped.length || m[2].content !== 'Thanks') return JSON.stringify(m).slice(0, 300);
  });

  await check('New chat forgets the conversation', async () => {
    await page.click('#new');
    const n = await page.$$eval('#messages .msg', (x) => x.length);
    if (n) return `${n} messages left`;
    await turn(page, 'Hello again');
    const m = sent[sent.length - 1].messages;
    return (m.length === 1 && m[0].content === 'Hello again') || JSON.stringify(m);
  });

  await check('a server error is shown readably and its turn is dropped', async () => {
    await page.fill('#max_tokens', '100000');
    await page.fill('#input', 'Too long a reply');
    await page.press('#input', 'Enter');
    await page.waitForSelector('#error:not([hidden])', { timeout: 10000 });
    const err = await page.textContent('#error');
    if (!err.startsWith('Error 400:') || !err.includes('max_tokens')) return `error '${err}'`;
    await page.fill('#max_tokens', '4');
    await turn(page, 'Fine');
    const m = sent[sent.length - 1].messages;
    if (m.map((x) => x.content).includes('Too long a reply')) return 'the failed turn was sent again';
    return (await page.isHidden('#error')) || 'the error stays after a good turn';
  });

  await check('the page fetches nothing but its own origin, and throws no errors', async () => {
    const others = [...origins].filter((o) => o !== new URL(urlPlain).origin);
    if (others.length) return `other origins: ${others}`;
    return errors.length === 0 || errors.join('; ');
  });

  const page2 = await browser.newPage();
  await check('a 401 asks for the API key, which then works', async () => {
    await page2.goto(urlThink + '/');
    await page2.waitForSelector('#error:not([hidden])', { timeout: 10000 });
    const err = await page2.textContent('#error');       // and the options opened on their own
    if (!err.includes('401') || !(await page2.isVisible('#api_key'))) return `error '${err}'`;
    await page2.fill('#api_key', key);
    await page2.dispatchEvent('#api_key', 'change');
    await page2.waitForFunction(() => document.getElementById('model').textContent === 'demo', null, { timeout: 10000 });
    return page2.isHidden('#error');
  });

  await check('reasoning is shown folded in <details>', async () => {
    await page2.fill('#temperature', '0');
    await page2.fill('#max_tokens', '12');
    await turn(page2, 'Why is the sky blue?');
    const d = await page2.$('.msg.assistant details.reasoning');
    if (!d) return 'no <details>';
    if (await d.evaluate((x) => x.open)) return 'the reasoning is open';
    const text = await d.evaluate((x) => x.querySelector('.text').textContent);
    const want = await chatRequest(urlThink, { messages: [{ role: 'user', content: 'Why is the sky blue?' }], temperature: 0, max_tokens: 12 }, { Authorization: `Bearer ${key}` });
    if (text !== want.choices[0].message.reasoning_content || !text.length) return `'${text}' vs '${want.choices[0].message.reasoning_content}'`;
    if (await d.evaluate((x) => x.querySelector('.text').checkVisibility())) return 'the folded text is visible';
    await d.evaluate((x) => x.querySelector('summary').click());
    return (await d.evaluate((x) => x.open && x.querySelector('.text').checkVisibility())) || 'does not unfold';
  });

  await browser.close();
})().catch((e) => { fail('chat page run', e && e.stack ? e.stack : e); process.exitCode = 1; });
