// The chat page of `cinfer serve`: the conversation lives here (sent whole with each turn to
// /v1/chat/completions, streamed); reasoning_content goes into a folded <details>; Stop
// aborts the fetch (the server cancels the sequence when the connection closes). Text is
// only ever set with textContent, never parsed as HTML.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const ui = {
    model: $('model'), messages: $('messages'), error: $('error'), form: $('composer'), input: $('input'),
    send: $('send'), stop: $('stop'), fresh: $('new'), system: $('system'), temperature: $('temperature'),
    maxTokens: $('max_tokens'), key: $('api_key'), keyRow: $('key_row'),
  };
  let history = [];          // [{role, content}] sent with the next turn
  let modelId = null;
  let running = null;        // {ctrl: AbortController} while a reply streams

  ui.key.value = localStorage.getItem('cinfer_api_key') || '';
  ui.key.addEventListener('change', () => { localStorage.setItem('cinfer_api_key', ui.key.value); loadModel(); });

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    if (ui.key.value) h.Authorization = 'Bearer ' + ui.key.value;
    return h;
  }

  function showError(text) {
    ui.error.textContent = text;
    ui.error.hidden = !text;
  }

  // A readable line from a failed HTTP reply: the API's error message when there is one.
  async function httpError(res) {
    let msg = '';
    try { const o = await res.json(); msg = (o && o.error && (o.error.message || o.error)) || ''; } catch (e) { /* not JSON */ }
    if (res.status === 401) {
      ui.keyRow.hidden = false;
      ui.keyRow.parentElement.open = true;
      return 'Error 401: this server needs an API key (Options, API key).';
    }
    return `Error ${res.status}: ${msg || res.statusText || 'request failed'}`;
  }

  async function loadModel() {
    try {
      const res = await fetch('/v1/models', { headers: headers() });
      if (!res.ok) { showError(await httpError(res)); return; }
      const o = await res.json();
      modelId = o.data && o.data[0] ? o.data[0].id : null;
      ui.model.textContent = modelId || '(no model)';
      document.title = `${modelId} · cinfer chat`;
      showError('');
    } catch (e) {
      showError(`Cannot reach the server: ${e.message}`);
    }
  }

  // Keeps the newest message in view: at most one scroll (one layout) per frame, however
  // many pieces of text arrive in it.
  let scrollPending = false;
  function scrollDown() {
    if (scrollPending) return;
    scrollPending = true;
    requestAnimationFrame(() => { scrollPending = false; ui.messages.scrollTop = ui.messages.scrollHeight; });
  }

  function addMessage(role, text) {
    const div = document.createElement('div');
    div.className = `msg ${role}`;
    const content = document.createElement('span');
    content.className = 'content';
    content.textContent = text;
    div.appendChild(content);
    ui.messages.appendChild(div);
    scrollDown();
    return div;
  }

  // The text of the folded reasoning block of an assistant message (made on first use).
  function reasoningOf(div) {
    let d = div.querySelector('details.reasoning');
    if (!d) {
      d = document.createElement('details');
      d.className = 'reasoning';
      const s = document.createElement('summary');
      s.textContent = 'Reasoning';
      const t = document.createElement('div');
      t.className = 'text';
      t.appendChild(document.createTextNode(''));
      d.append(s, t);
      div.insertBefore(d, div.firstChild);
    }
    return d.querySelector('.text').firstChild;
  }

  function note(div, text) {
    const n = document.createElement('span');
    n.className = 'note';
    n.textContent = text;
    div.appendChild(n);
  }

  function setRunning(r) {
    running = r;
    ui.send.disabled = !!r;
    ui.stop.disabled = !r;
  }

  // Reads a server-sent event stream, calling onData with each parsed `data:` object.
  async function readEvents(res, onData) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of block.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') return;
          onData(JSON.parse(data));
        }
      }
    }
  }

  async function sendTurn(text) {
    showError('');
    const conv = history;      // a new chat while this reply runs starts another array
    conv.push({ role: 'user', content: text });
    addMessage('user', text);
    const div = addMessage('assistant', '');
    div.classList.add('running');
    const content = div.querySelector('.content').appendChild(document.createTextNode(''));   // grows by appendData
    const ctrl = new AbortController();
    setRunning({ ctrl });
    let reply = '', finish = null;
    const messages = ui.system.value ? [{ role: 'system', content: ui.system.value }, ...conv] : conv;
    const body = { messages, stream: true };
    if (modelId) body.model = modelId;
    if (ui.temperature.value !== '') body.temperature = Number(ui.temperature.value);
    if (ui.maxTokens.value !== '') body.max_tokens = Number(ui.maxTokens.value);
    try {
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: ctrl.signal });
      if (!res.ok) throw new Error(await httpError(res));
      await readEvents(res, (o) => {
        if (o.error) throw new Error(`Error: ${o.error.message}`);
        const c = o.choices && o.choices[0];
        if (!c) return;
        const d = c.delta || {};
        if (d.reasoning_content) reasoningOf(div).appendData(d.reasoning_content);
        if (d.content) { reply += d.content; content.appendData(d.content); }
        if (d.tool_calls) note(div, `(tool calls: ${d.tool_calls.map((t) => t.function && t.function.name).join(', ')})`);
        if (c.finish_reason) finish = c.finish_reason;
        scrollDown();
      });
      if (finish === 'length') note(div, '(cut at the token limit)');
      div.dataset.finish = finish || 'stop';
    } catch (e) {
      if (ctrl.signal.aborted) {
        note(div, '(stopped)');
        div.dataset.finish = 'stopped';
      } else {
        showError(e.message.startsWith('Error') ? e.message : `Cannot reach the server: ${e.message}`);
        div.dataset.finish = 'error';
      }
    } finally {
      div.classList.remove('running');
      if (running && running.ctrl === ctrl) setRunning(null);
    }
    // a stopped reply stays in the conversation as far as it got; a failed turn is dropped
    if (div.dataset.finish === 'error') {
      conv.pop();
      if (!reply) div.remove();
    } else {
      conv.push({ role: 'assistant', content: reply });
    }
  }

  ui.form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = ui.input.value.trim();
    if (!text || running) return;
    ui.input.value = '';
    sendTurn(text);
  });
  ui.input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); ui.form.requestSubmit(); }
  });
  ui.stop.addEventListener('click', () => { if (running) running.ctrl.abort(); });
  ui.fresh.addEventListener('click', () => {
    if (running) running.ctrl.abort();
    history = [];
    ui.messages.textContent = '';
    showError('');
    ui.input.focus();
  });

  loadModel();
})();
