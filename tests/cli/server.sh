# `cinfer serve` end to end, on loopback, with the embedded demo model (no --model).
#
# Server A (API key, body limit 64 KiB): the official openai npm client (tests/server/
# openai_client.js: chat, streaming, completions, errors, cached_tokens, 8 concurrent seeded
# requests and a 16 x 4 streaming load round, each equal to its solo run; tests/server/
# responses_client.js: the Responses API through responses.create / responses.stream), the
# Responses API's raw edges (bad items, hostile sizes, the SSE framing) and the chat page's
# files (GET / without the key, its content types and security headers), then raw HTTP with
# curl for what a client library never sends: malformed JSON, wrong methods and routes,
# oversize bodies, wrong field types, a prompt beyond the context, logit_bias (forcing,
# banning, bad maps), JSON mode (response_format json_object; a json_schema keyword cinfer lacks is a 400; the
# structured outputs themselves are tests/cli/schema.sh), Anthropic /v1/messages
# (plain, streamed, its error shape), tokenize round trip, greedy text equal to
# `cinfer generate --chat`, a client that disconnects mid-stream (its sequence is
# cancelled), /metrics against what was sent. Server B (--parallel 1 --queue 0): a second
# request while one runs gets 503 with Retry-After. Server C (--per-client 1): a client
# address with a generation in flight gets 429 with Retry-After for a second one (both API
# dialects), another address is served meanwhile, and the first is served again once its
# generation ends; a client that stalls mid-body is dropped after --timeout while others are
# served. Server D (the demo model with Qwen3's chat template through --chat-template; a
# missing or broken template file is a start-up error): tool_choice none / auto /
# required / a named function (the reply starts with the template's call opening), and the
# Anthropic tools form (tool_use / tool_result history, tool_choice, errors), and the
# Responses API's function tools (responses_client.js tools). Server E (a template that opens
# <think>): Responses reasoning items and their stream events. The servers are stopped with SIGTERM
# and must exit 0 with a clean stderr (this script also runs on the ASan/UBSan build, where
# a leak or an error report fails it). Servers take any free port (--port 0); the trap kills
# whatever is left. Bounded: every curl has a timeout and the whole script stays < 60 s.
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
KEY=sk-cinfer-test
asan=0; case "$CINFER" in *asan*) asan=1 ;; esac

# req METHOD PATH [BODY] [curl args...]: status in $STATUS, body in $TMP/body, headers in $TMP/hdr
req() {
  local method=$1 path=$2; shift 2
  local body=
  if [ $# -gt 0 ]; then body=$1; shift; fi
  if [ -n "$body" ]; then
    STATUS=$(curl -s -m 20 -X "$method" -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' -H 'Content-Type: application/json' \
             --data-binary "$body" "$@" "http://127.0.0.1:$PORT$path")
  else
    STATUS=$(curl -s -m 20 -X "$method" -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' "$@" "http://127.0.0.1:$PORT$path")
  fi
}
AUTH=(-H "Authorization: Bearer $KEY")
# js EXPR: evaluates EXPR with o = the JSON of $TMP/body (prints it); parses(s) is JSON.parse(s), or
# undefined where that throws. With node (what the project installs), else (the GPU machine has no
# node) or with JS_EVAL=python, tests/cli/jsexpr.py: the same expressions in python3, as are the
# few data helpers below (jsh). SERVE_DEVICE=cuda runs every server (and the generate it is
# compared with) on that device (tests/gpu/run.sh).
if [ "${JS_EVAL:-}" = python ] || ! command -v node >/dev/null; then usenode=0; else usenode=1; fi
js() {
  if [ $usenode = 1 ]; then
    node -e 'const fs=require("fs");let o;try{o=JSON.parse(fs.readFileSync(process.argv[1],"utf8"))}catch(e){o=null};
      const parses=s=>{try{return JSON.parse(s)}catch(e){return undefined}};console.log(eval(process.argv[2]))' "$TMP/body" "$1"
  else python3 tests/cli/jsexpr.py eval "$TMP/body" "$1"; fi
}
jsh() { python3 tests/cli/jsexpr.py "$@"; }
SDEV=(${SERVE_DEVICE:+--device "$SERVE_DEVICE"})
# expect NAME WANT_STATUS JS_CONDITION
expect() {
  local name=$1 want=$2 cond=$3
  if [ "$STATUS" != "$want" ]; then fail "$name" "status $STATUS, want $want: $(head -c 300 "$TMP/body")"
  elif [ "$(js "!!($cond)")" != true ]; then fail "$name" "condition $cond on $(head -c 300 "$TMP/body")"
  else pass "$name"; fi
}
oai_err() { echo "o.error && typeof o.error.message === 'string' && o.error.param === $1"; }
metric() { curl -s -m 10 "${AUTH[@]}" "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }

# the CLI must know the command
if "$CINFER" serve --port x 2>&1 | grep -q "unknown command"; then fail "cinfer serve" "the serve command is not wired into apps/cinfer.c"; exit 1; fi
if ! command -v node >/dev/null; then echo "NOTE no node here: the openai npm client checks are skipped"
elif bash tests/server/setup_npm.sh >"$TMP/npm.log" 2>&1; then pass "openai npm client installed"; else fail "openai npm client installed" "$(tail -3 "$TMP/npm.log")"; fi

# ---------------------------------------------------------------- server A
start_server A --api-key "$KEY" --max-body 65536 --parallel 8 "${SDEV[@]}" || exit 1
PA=$PID; PORTA=$PORT
if command -v node >/dev/null && [ -f .cache/npm/node_modules/openai/package.json ]; then
  timeout 45 node tests/server/openai_client.js "http://127.0.0.1:$PORT/v1" "$KEY" >"$TMP/node.out" 2>&1
  cat "$TMP/node.out" | grep -E '^(PASS|FAIL) ' | sed 's/^PASS /PASS openai client: /; s/^FAIL /FAIL openai client: /'
  grep -qE '^(PASS|FAIL) ' "$TMP/node.out" || fail "openai client runs" "$(tail -c 400 "$TMP/node.out")"
  timeout 60 node tests/server/responses_client.js "http://127.0.0.1:$PORT/v1" "$KEY" basic >"$TMP/node.out" 2>&1
  grep -E '^(PASS|FAIL) ' "$TMP/node.out" | sed 's/^PASS /PASS openai responses: /; s/^FAIL /FAIL openai responses: /'
  [ "$(grep -cE '^(PASS|FAIL) ' "$TMP/node.out")" -ge 17 ] || fail "openai responses client runs every check" "$(tail -c 400 "$TMP/node.out" | tr '\n' ' ')"
fi

# the Responses API: what a client library never sends, and the stream's framing
rreq() { req POST /v1/responses "$1" "${AUTH[@]}"; }
rreq '{"input":"hi"'; expect "responses: malformed JSON is 400" 400 "o.error.message.includes('malformed JSON')"
req GET /v1/responses "" "${AUTH[@]}"; expect "responses: GET is 405" 405 "o.error"
rreq '{"input":[{"type":"function_call","call_id":7,"name":"f","arguments":"{}"}]}'
expect "responses: a call_id of the wrong type is 400" 400 "$(oai_err "'input[0]'") && o.error.message.includes('call_id')"
rreq '{"input":[{"type":"function_call_output","call_id":"c","output":{"a":1}}]}'
expect "responses: an output object is 400" 400 "$(oai_err "'input[0].output'")"
rreq '{"input":"x","tools":[{"type":"function","name":"f","parameters":"{}"}]}'
expect "responses: tool parameters as a string is 400" 400 "$(oai_err "'tools[0]'") && o.error.message.includes('parameters')"
rreq '{"input":"x","text":{"format":{"type":"json_object"}},"tool_choice":"sometimes"}'
expect "responses: a bad tool_choice string is 400 (chat's check)" 400 "$(oai_err "'tool_choice'")"
if [ $usenode = 1 ]; then items=$(node -e 'console.log(JSON.stringify({input: Array.from({length: 5000}, () => ({}))}))'); else items=$(jsh items 5000); fi
rreq "$items"; expect "responses: 5000 input items is 400" 400 "$(oai_err "'input'") && o.error.message.includes('at most')"
if [ $usenode = 1 ]; then deep=$(node -e 'let v="1";for(let i=0;i<3000;i++)v="["+v+"]";console.log(JSON.stringify({input:"x",metadata:{}}).replace("{}","{\"k\":"+v+"}"))')
else deep=$(jsh deep 3000); fi
rreq "$deep"; if [ "$STATUS" = 400 ] || [ "$STATUS" = 200 ]; then pass "responses: a 3000-deep body is answered ($STATUS)"; else fail "responses: a 3000-deep body" "status $STATUS"; fi
rlong=$(for i in $(seq 1 1200); do printf 'word%d ' "$i"; done)
rreq "{\"input\":\"$rlong\"}"; expect "responses: a prompt beyond the context is 400 naming input" 400 "$(oai_err "'input'") && o.error.code === 'context_length_exceeded'"
curl -s -m 20 -N "${AUTH[@]}" -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/responses" \
  -d '{"model":"demo","input":"Hello","max_output_tokens":6,"temperature":0,"stream":true}' >"$TMP/sse"
if [ $usenode = 1 ]; then
framing=$(node -e 'const t=require("fs").readFileSync(process.argv[1],"utf8");const blocks=t.split("\n\n").filter(Boolean);
  const bad=blocks.filter(b=>{const m=/^event: (\S+)\ndata: (.*)$/.exec(b);return !m||JSON.parse(m[2]).type!==m[1]});
  console.log(bad.length===0&&!t.includes("[DONE]")&&blocks.length>6?"ok":"bad "+bad.length+" of "+blocks.length)' "$TMP/sse")
else framing=$(jsh sse-framing "$TMP/sse"); fi
if [ "$framing" = ok ]; then pass "responses: every SSE block is 'event: T' + data of type T, no [DONE]"; else fail "responses: SSE framing" "$framing: $(head -c 300 "$TMP/sse")"; fi

# the chat page: served without the key, with its types and a content security policy
req GET /; expect_page() { if [ "$STATUS" = "$2" ] && grep -qi "^Content-Type: $3" "$TMP/hdr" && grep -q "$4" "$TMP/body"; then pass "$1"; else fail "$1" "status $STATUS $(grep -i '^content-type' "$TMP/hdr")"; fi; }
expect_page "GET / is the chat page, without the key" 200 "text/html" '<script src="/chat.js">'
if grep -qi "^Content-Security-Policy: default-src 'self'" "$TMP/hdr"; then pass "the page has a content security policy"; else fail "the page has a content security policy" "$(cat "$TMP/hdr")"; fi
req GET /chat.js; expect_page "GET /chat.js" 200 "text/javascript" "/v1/chat/completions"
req GET /chat.css; expect_page "GET /chat.css" 200 "text/css" "details.reasoning"
req POST / '{}'; expect "POST / is 405" 405 "o.error"
req GET /nope.js; expect "an unknown page file is 404" 404 "o.error"

req GET /health; expect "health needs no key" 200 "o.status === 'ok'"
req GET /v1/models; expect "models without the key is 401" 401 "o.error.type === 'authentication_error' && o.error.code === 'invalid_api_key'"
req GET /v1/models "" -H "Authorization: Bearer nope"; expect "a wrong key is 401" 401 "o.error.code === 'invalid_api_key'"
req GET /v1/models "" -H "x-api-key: $KEY"; expect "x-api-key header accepted" 200 "o.data[0].id === 'demo'"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}' "${AUTH[@]}"
expect "malformed JSON is 400" 400 "o.error.message.includes('malformed JSON')"
req POST /v1/chat/completions '[1,2]' "${AUTH[@]}"; expect "a non-object body is 400" 400 "o.error.message.includes('JSON object')"
req POST /v1/chat/completions '' "${AUTH[@]}"; expect "an empty body is 400" 400 "o.error.message.includes('empty')"
req GET /v1/chat/completions "" "${AUTH[@]}"; expect "GET on a POST route is 405" 405 "o.error"
req GET /v2/nothing "" "${AUTH[@]}"; expect "unknown route is 404" 404 "o.error.type === 'not_found_error'"
big=$(head -c 100000 /dev/zero | tr '\0' 'a')
req POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$big\"}]}" "${AUTH[@]}"
expect "a 100 KB body over the 64 KiB limit is 413" 413 "o.error.code === 'request_too_large'"
req POST /v1/chat/completions '{"model":"demo","messages":"hi"}' "${AUTH[@]}"; expect "messages of the wrong type is 400" 400 "$(oai_err "'messages'")"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}' "${AUTH[@]}"
expect "an image content part is 400" 400 "o.error.message.includes('image_url')"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"wizard","content":"hi"}]}' "${AUTH[@]}"; expect "an unknown role is 400" 400 "$(oai_err "'messages[0]'")"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}],"n":2}' "${AUTH[@]}"; expect "n=2 is 400" 400 "$(oai_err "'n'")"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}],"stop":42}' "${AUTH[@]}"; expect "stop of the wrong type is 400" 400 "$(oai_err "'stop'")"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":0}' "${AUTH[@]}"; expect "max_tokens 0 is 400" 400 "$(oai_err "'max_tokens'")"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}],"seed":"x"}' "${AUTH[@]}"; expect "seed of the wrong type is 400" 400 "$(oai_err "'seed'")"
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"hi"}],"stream":"yes"}' "${AUTH[@]}"; expect "stream of the wrong type is 400" 400 "$(oai_err "'stream'")"
long=$(for i in $(seq 1 1200); do printf 'word%d ' "$i"; done)
req POST /v1/chat/completions "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}" "${AUTH[@]}"
expect "a prompt longer than the context is 400" 400 "o.error.code === 'context_length_exceeded'"

# greedy text equals the CLI's
want=$("$CINFER" generate --model models/demo --chat "Once upon a time" --max-tokens 20 "${SDEV[@]}" 2>/dev/null)
req POST /v1/chat/completions '{"model":"demo","messages":[{"role":"user","content":"Once upon a time"}],"temperature":0,"max_tokens":20}' "${AUTH[@]}"
got=$(js "o.choices[0].message.content")
if [ "$STATUS" = 200 ] && [ "$got" = "$want" ]; then pass "greedy chat equals cinfer generate --chat"; else fail "greedy chat equals cinfer generate --chat" "server '$got' cli '$want'"; fi

# tokenize / detokenize
req POST /tokenize '{"content":"Hello world, twice."}' "${AUTH[@]}"; expect "tokenize" 200 "Array.isArray(o.tokens) && o.tokens.length > 2"
ids=$(js "JSON.stringify(o.tokens)")
req POST /detokenize "{\"tokens\":$ids}" "${AUTH[@]}"; expect "detokenize round trip" 200 "o.content.endsWith('Hello world, twice.')"
req POST /detokenize '{"tokens":[1,-5]}' "${AUTH[@]}"; expect "detokenize of a bad id is 400" 400 "$(oai_err "'tokens'")"

# logit_bias: +100 on one token makes greedy decoding repeat it; bad maps are 400
req POST /tokenize '{"content":" the"}' "${AUTH[@]}"
the=$(js "o.tokens[o.tokens.length - 1]")
req POST /v1/completions "{\"prompt\":\"Dogs are\",\"max_tokens\":3,\"temperature\":0,\"logit_bias\":{\"$the\":100}}" "${AUTH[@]}"
expect "logit_bias +100 forces the token" 200 "o.choices[0].text === ' the the the'"
req POST /v1/completions '{"prompt":"Dogs are","max_tokens":3,"temperature":0}' "${AUTH[@]}"
plain=$(js "o.choices[0].text")
req POST /v1/completions '{"prompt":"Dogs are","max_tokens":1,"temperature":0,"logprobs":1}' "${AUTH[@]}"
first=$(js "o.choices[0].text")
if [ $usenode = 1 ]; then tbody=$(node -e 'console.log(JSON.stringify({content: process.argv[1]}))' "$first"); else tbody=$(jsh content "$first"); fi
req POST /tokenize "$tbody" "${AUTH[@]}"
fid=$(js "o.tokens[o.tokens.length - 1]")
req POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"temperature\":0,\"logit_bias\":{\"$the\":100}}" "${AUTH[@]}"
expect "logit_bias on chat completions" 200 "o.choices[0].message.content === ' the the'"
req POST /v1/completions "{\"prompt\":\"Dogs are\",\"max_tokens\":3,\"temperature\":0,\"logit_bias\":{\"$fid\":-100}}" "${AUTH[@]}"
expect "logit_bias -100 bans the greedy token" 200 "o.choices[0].text.length > 0 && o.choices[0].text !== '$plain'"
req POST /v1/completions '{"prompt":"x","max_tokens":2,"logit_bias":{"12":101}}' "${AUTH[@]}"
expect "logit_bias over 100 is 400" 400 "$(oai_err "'logit_bias'")"
req POST /v1/completions '{"prompt":"x","max_tokens":2,"logit_bias":{"dog":1}}' "${AUTH[@]}"
expect "logit_bias with a non-id key is 400" 400 "$(oai_err "'logit_bias'") && o.error.message.includes('dog')"
req POST /v1/completions '{"prompt":"x","max_tokens":2,"logit_bias":{"99999999":1}}' "${AUTH[@]}"
expect "logit_bias with an id beyond the vocabulary is 400" 400 "$(oai_err "'logit_bias'")"
req POST /v1/completions '{"prompt":"x","max_tokens":2,"logit_bias":[1,2]}' "${AUTH[@]}"
expect "logit_bias as an array is 400" 400 "$(oai_err "'logit_bias'")"

# JSON mode: sampled replies are JSON prefixes, and whole objects when they stop
okj=1
for seed in 1 2 3 4 5 6; do
  req POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"A dog as JSON\"}],\"max_tokens\":60,\"temperature\":1,\"seed\":$seed,\"response_format\":{\"type\":\"json_object\"}}" "${AUTH[@]}"
  r=$(js "(c => c.finish_reason === 'stop' ? (v => v !== null && typeof v === 'object' && !Array.isArray(v))(parses(c.message.content)) : c.finish_reason === 'length' && c.message.content.trim().startsWith('{'))(o.choices[0])")
  [ "$STATUS" = 200 ] && [ "$r" = true ] || { okj=0; echo "# seed $seed: $(head -c 300 "$TMP/body")"; }
done
if [ $okj = 1 ]; then pass "response_format json_object: JSON objects (or their prefixes when cut)"; else fail "response_format json_object" "see above"; fi
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","not":{}}}}}' "${AUTH[@]}"
expect "response_format json_schema with an unsupported keyword is 400 naming it" 400 "$(oai_err "'response_format'") && o.error.message.includes(\"unsupported keyword 'not'\")"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"response_format":{"type":"yaml"}}' "${AUTH[@]}"
expect "response_format of an unknown type is 400" 400 "$(oai_err "'response_format'")"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"response_format":"json"}' "${AUTH[@]}"
expect "response_format as a string is 400" 400 "$(oai_err "'response_format'")"

# Anthropic messages
req POST /v1/messages '{"model":"demo","max_tokens":12,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Tell me about dogs"}]}],"temperature":0}' "${AUTH[@]}"
expect "anthropic messages" 200 "o.type === 'message' && o.role === 'assistant' && o.content[0].type === 'text' && o.content[0].text.length > 0 && ['end_turn','max_tokens'].includes(o.stop_reason) && o.usage.input_tokens > 0 && o.usage.output_tokens > 0"
atext=$(js "o.content[0].text")
curl -s -m 20 -N "${AUTH[@]}" -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/messages" \
  -d '{"model":"demo","max_tokens":12,"system":"Be brief.","messages":[{"role":"user","content":"Tell me about dogs"}],"temperature":0,"stream":true}' >"$TMP/sse"
events=$(grep '^event: ' "$TMP/sse" | cut -d' ' -f2 | uniq | tr '\n' ' ')
if [ $usenode = 1 ]; then
stext=$(grep '^data: ' "$TMP/sse" | sed 's/^data: //' | node -e 'let t="";require("readline").createInterface({input:process.stdin}).on("line",l=>{const o=JSON.parse(l);if(o.type==="content_block_delta")t+=o.delta.text}).on("close",()=>process.stdout.write(t))')
else stext=$(grep '^data: ' "$TMP/sse" | sed 's/^data: //' | jsh anthropic-text); fi
if [ "$events" = "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop " ] && [ "$stext" = "$atext" ]; then
  pass "anthropic messages stream"; else fail "anthropic messages stream" "events '$events' text '$stext' vs '$atext'"; fi
req POST /v1/messages '{"model":"demo","messages":[{"role":"user","content":"hi"}]}' "${AUTH[@]}"
expect "anthropic error shape (max_tokens missing)" 400 "o.type === 'error' && o.error.type === 'invalid_request_error' && o.error.message.includes('max_tokens')"
req POST /v1/messages '{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}' "${AUTH[@]}"
expect "anthropic unknown model is 404" 404 "o.type === 'error' && o.error.type === 'not_found_error'"
n_msgs=4

# a client that leaves mid-stream cancels its sequence: it hangs up once the first chunk has come
# (a fixed timeout raced the generation itself: 1000 tokens of the demo model can take under 0.5 s)
d0=$(metric cinfer_client_disconnects_total)
curl -s -N "${AUTH[@]}" -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/chat/completions" \
  -d '{"model":"demo","messages":[{"role":"user","content":"go on"}],"max_tokens":1000,"ignore_eos":true,"stream":true}' >"$TMP/hangup" &
cpid=$!
for _ in $(seq 1 200); do grep -q '"content"' "$TMP/hangup" 2>/dev/null && break; sleep 0.01; done
kill $cpid 2>/dev/null; wait $cpid 2>/dev/null
ok=0
for _ in $(seq 1 40); do
  [ "$(metric cinfer_active_sequences)" = 0 ] && [ "$(metric cinfer_client_disconnects_total)" -gt "$d0" ] && { ok=1; break; }
  sleep 0.1
done
gen=$(metric cinfer_generation_tokens_total)
if [ $ok = 1 ]; then pass "a disconnected stream is cancelled"; else fail "a disconnected stream is cancelled" "active $(metric cinfer_active_sequences) disconnects $(metric cinfer_client_disconnects_total)"; fi
sleep 0.3
if [ "$(metric cinfer_generation_tokens_total)" = "$gen" ]; then pass "nothing generates after the cancel"; else fail "nothing generates after the cancel" "tokens still growing"; fi

# metrics agree with what this script sent
m=$(metric 'cinfer_requests_total{route="messages"}')
h=$(metric 'cinfer_requests_total{route="health"}')
if [ "$m" = "$n_msgs" ] && [ "$h" = 1 ] && [ "$(metric cinfer_queue_depth)" = 0 ] && [ "$(metric cinfer_prefix_cache_hit_tokens_total)" -gt 0 ]; then
  pass "metrics count the requests sent"; else fail "metrics count the requests sent" "messages $m (want $n_msgs), health $h (want 1)"; fi
req GET /health; expect "healthy after everything" 200 "o.status === 'ok'"
stop_server A "$PA"

# ---------------------------------------------------------------- server B: a full queue
start_server B --parallel 1 --queue 0 "${SDEV[@]}" || exit 1
PB=$PID
curl -s -m 20 -N -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/completions" \
  -d '{"prompt":"x","max_tokens":1000,"ignore_eos":true,"stream":true}' >/dev/null & CURLPID=$!
PIDS+=("$CURLPID")
for _ in $(seq 1 50); do [ "$(metric cinfer_active_sequences)" = 1 ] && break; sleep 0.05; done
req POST /v1/completions '{"prompt":"y","max_tokens":4}'
if [ "$STATUS" = 503 ] && grep -qi '^Retry-After: 1' "$TMP/hdr" && [ "$(js "o.error.code")" = server_busy ]; then
  pass "a full queue answers 503 with Retry-After"; else fail "a full queue answers 503 with Retry-After" "status $STATUS $(head -c 200 "$TMP/body")"; fi
kill "$CURLPID" 2>/dev/null; wait "$CURLPID" 2>/dev/null
for _ in $(seq 1 40); do [ "$(metric cinfer_active_sequences)" = 0 ] && break; sleep 0.1; done
req POST /v1/completions '{"prompt":"y","max_tokens":4,"temperature":0}'; expect "served again once the slot is free" 200 "o.choices[0].text.length > 0"
stop_server B "$PB"

# ---------------------------------------------------------------- server C: per-client limit
start_server C --parallel 4 --per-client 1 --timeout 2 "${SDEV[@]}" || exit 1
PC=$PID
# a stalled client: headers and part of a body, then silence; the server drops it after
# --timeout seconds and serves others meanwhile
t0=$(date +%s)
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"prompt"' >&3
req POST /v1/completions '{"prompt":"y","max_tokens":4,"temperature":0}'
expect "served while another client stalls mid-body" 200 "o.choices[0].text.length > 0"
dt=-1; timeout 10 cat <&3 >/dev/null 2>&1 && dt=$(( $(date +%s) - t0 ))
if [ "$dt" -ge 1 ] && [ "$dt" -le 6 ]; then pass "a stalled client is dropped after --timeout"
else fail "a stalled client is dropped after --timeout" "closed after $dt s (want 1..6; -1: never)"; fi
exec 3<&- 3>&-
curl -s -m 20 -N -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/completions" \
  -d '{"prompt":"x","max_tokens":1000,"ignore_eos":true,"stream":true}' >/dev/null & CURLPID=$!
PIDS+=("$CURLPID")
for _ in $(seq 1 50); do [ "$(metric cinfer_active_sequences)" = 1 ] && break; sleep 0.05; done
req POST /v1/completions '{"prompt":"y","max_tokens":4}'
if [ "$STATUS" = 429 ] && grep -qi '^Retry-After: 1' "$TMP/hdr" && [ "$(js "o.error.code")" = rate_limit_exceeded ]; then
  pass "a client over --per-client gets 429 with Retry-After"; else fail "a client over --per-client gets 429 with Retry-After" "status $STATUS $(head -c 200 "$TMP/body")"; fi
req POST /v1/messages '{"model":"demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}'
expect "the Anthropic dialect says rate_limit_error" 429 "o.type === 'error' && o.error.type === 'rate_limit_error'"
req POST /v1/completions '{"prompt":"y","max_tokens":4,"temperature":0}' --interface 127.0.0.2
expect "another client address is served meanwhile" 200 "o.choices[0].text.length > 0"
if [ "$(metric cinfer_client_limited_total)" = 2 ]; then pass "metrics count the limited requests"; else
  fail "metrics count the limited requests" "cinfer_client_limited_total $(metric cinfer_client_limited_total) (want 2)"; fi
kill "$CURLPID" 2>/dev/null; wait "$CURLPID" 2>/dev/null
ok=0
for _ in $(seq 1 40); do
  req POST /v1/completions '{"prompt":"y","max_tokens":4,"temperature":0}'
  [ "$STATUS" = 200 ] && { ok=1; break; }
  sleep 0.1
done
if [ $ok = 1 ]; then pass "the client is served again once its generation ends"; else fail "the client is served again once its generation ends" "status $STATUS"; fi
stop_server C "$PC"

# ---------------------------------------------------------------- server D: tool_choice
if [ -f .cache/tokenizers/qwen3/tokenizer_config.json ]; then
  if [ $usenode = 1 ]; then
    node -e 'const fs=require("fs");fs.writeFileSync(process.argv[2],JSON.parse(fs.readFileSync(process.argv[1],"utf8")).chat_template)' \
      .cache/tokenizers/qwen3/tokenizer_config.json "$TMP/qwen3.jinja"
  else jsh template .cache/tokenizers/qwen3/tokenizer_config.json "$TMP/qwen3.jinja"; fi
  printf '{%% for m in messages %%}{{ m.content }\n' >"$TMP/broken.jinja"
  expect_err "serve --chat-template of a missing file" "$TMP/nope.jinja" "$CINFER" serve --port 0 --chat-template "$TMP/nope.jinja"
  expect_err "serve --chat-template that does not compile" "broken.jinja" "$CINFER" serve --port 0 --chat-template "$TMP/broken.jinja"
  start_server D --chat-template "$TMP/qwen3.jinja" --name dq "${SDEV[@]}" || exit 1
  PD=$PID
  TOOLS='[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}]'
  chat() { req POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":6,\"temperature\":0$1}"; }
  chat ""; plain=$(js "o.usage.prompt_tokens")
  chat ",\"tools\":$TOOLS"; auto=$(js "o.usage.prompt_tokens")
  chat ",\"tools\":$TOOLS,\"tool_choice\":\"none\""; expect "tool_choice none: the tools are left out of the prompt" 200 "o.usage.prompt_tokens === $plain && $auto > $plain && !o.choices[0].message.tool_calls"
  chat ",\"tools\":$TOOLS,\"tool_choice\":\"auto\""; expect "tool_choice auto: the same prompt as no choice" 200 "o.usage.prompt_tokens === $auto"
  chat ",\"tools\":$TOOLS,\"tool_choice\":\"required\""; req_n=$(js "o.usage.prompt_tokens")
  expect "tool_choice required: the reply starts inside a call" 200 "o.usage.prompt_tokens > $auto && (o.choices[0].finish_reason === 'tool_calls' ? o.choices[0].message.tool_calls.length > 0 : o.choices[0].message.content.startsWith('<tool_call>\\n{\"name\": \"'))"
  chat ",\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"
  expect "tool_choice naming a function: the reply starts with its call" 200 "o.usage.prompt_tokens > $req_n && (o.choices[0].finish_reason === 'tool_calls' ? o.choices[0].message.tool_calls[0].function.name === 'get_weather' : o.choices[0].message.content.startsWith('<tool_call>\\n{\"name\": \"get_weather\", \"arguments\": '))"
  curl -s -m 20 -N -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/chat/completions" \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":6,\"temperature\":0,\"stream\":true,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}}}" >"$TMP/sse"
  if grep -q '"finish_reason":"\(tool_calls\|length\|stop\)"' "$TMP/sse" && grep -q '^data: \[DONE\]' "$TMP/sse" && (grep -q '"name":"now"' "$TMP/sse" || grep -q 'tool_call>' "$TMP/sse"); then
    pass "tool_choice naming a function, streamed"; else fail "tool_choice naming a function, streamed" "$(head -c 400 "$TMP/sse")"; fi
  chat ",\"tools\":$TOOLS,\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}"
  expect "json_object with a required tool call is 400" 400 "$(oai_err "'response_format'")"
  chat ",\"tool_choice\":\"required\""; expect "tool_choice required without tools is 400" 400 "$(oai_err "'tool_choice'")"
  chat ",\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}"
  expect "tool_choice naming an unknown function is 400" 400 "$(oai_err "'tool_choice'") && o.error.message.includes('nope')"
  chat ",\"tools\":$TOOLS,\"tool_choice\":\"always\""; expect "tool_choice with a bad value is 400" 400 "$(oai_err "'tool_choice'")"
  chat ",\"tools\":$TOOLS,\"tool_choice\":7"; expect "tool_choice of a wrong type is 400" 400 "$(oai_err "'tool_choice'")"
  # Anthropic tools: a tool_use / tool_result history renders the same prompt as its OpenAI form
  ATOOLS='[{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},{"name":"now","input_schema":{"type":"object","properties":{}}}]'
  AHIST='[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"21 C"},{"type":"text","text":"And tomorrow?"}]}]'
  OHIST='[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"toolu_1","content":"21 C"},{"role":"user","content":"And tomorrow?"}]'
  req POST /v1/chat/completions "{\"messages\":$OHIST,\"tools\":$TOOLS,\"max_tokens\":1,\"temperature\":0}"; oai_n=$(js "o.usage.prompt_tokens")
  req POST /v1/messages "{\"model\":\"dq\",\"system\":\"Be brief.\",\"messages\":$AHIST,\"tools\":$ATOOLS,\"max_tokens\":4,\"temperature\":0}"
  expect "anthropic tool_use / tool_result history renders as its OpenAI form" 200 "o.usage.input_tokens === $oai_n && o.content.length >= 1"
  req POST /v1/messages "{\"model\":\"dq\",\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":$ATOOLS,\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"},\"max_tokens\":6,\"temperature\":0}"
  expect "anthropic tool_choice tool: the reply starts with its call" 200 "o.stop_reason === 'tool_use' ? o.content.some(b => b.type === 'tool_use' && b.name === 'get_weather' && typeof b.input === 'object') : o.content[0].type === 'text' && o.content[0].text.startsWith('<tool_call>\\n{\"name\": \"get_weather\", \"arguments\": ')"
  curl -s -m 20 -N -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/messages" \
    -d "{\"model\":\"dq\",\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":$ATOOLS,\"tool_choice\":{\"type\":\"any\"},\"max_tokens\":6,\"temperature\":0,\"stream\":true}" >"$TMP/sse"
  if grep -q '^event: message_start' "$TMP/sse" && grep -q '^event: message_stop' "$TMP/sse" && grep -q '"stop_reason":"\(tool_use\|max_tokens\|end_turn\)"' "$TMP/sse"; then
    pass "anthropic tool_choice any, streamed"; else fail "anthropic tool_choice any, streamed" "$(head -c 400 "$TMP/sse")"; fi
  areq() { req POST /v1/messages "{\"model\":\"dq\",\"max_tokens\":4,$1}"; }
  areq "\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"x\",\"content\":\"y\"}]}]"
  expect "anthropic tool_result in an assistant message is 400" 400 "o.type === 'error' && o.error.message.includes('tool_result')"
  areq "\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"now\",\"input\":{}}]}]"
  expect "anthropic tool_use without an id is 400" 400 "o.type === 'error' && o.error.message.includes('tool_use')"
  areq "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"now\"}]"
  expect "anthropic tool without input_schema is 400" 400 "o.type === 'error' && o.error.message.includes('input_schema')"
  areq "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$ATOOLS,\"tool_choice\":{\"type\":\"sometimes\"}"
  expect "anthropic bad tool_choice is 400" 400 "o.type === 'error' && o.error.message.includes('tool_choice')"
  areq "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]"
  expect "anthropic image block is 400" 400 "o.type === 'error' && o.error.message.includes('image')"
  if command -v node >/dev/null; then
    MODEL=dq timeout 60 node tests/server/responses_client.js "http://127.0.0.1:$PORT/v1" "" tools >"$TMP/node.out" 2>&1
    grep -E '^(PASS|FAIL) ' "$TMP/node.out" | sed 's/^PASS /PASS openai responses: /; s/^FAIL /FAIL openai responses: /'
    [ "$(grep -cE '^(PASS|FAIL) ' "$TMP/node.out")" -ge 5 ] || fail "openai responses client (tools) runs every check" "$(tail -c 400 "$TMP/node.out" | tr '\n' ' ')"
  fi
  stop_server D "$PD"
else
  fail "tool_choice (server D)" ".cache/tokenizers/qwen3 is missing: run scripts/fetch-tokenizers.sh"
fi

# ---------------------------------------------------------------- server E: reasoning
printf '%s' "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>
{{ m['content'] }}<|end|>
{% endfor %}{% if add_generation_prompt %}<|assistant|>
<think>
{% endif %}" >"$TMP/think.jinja"
start_server E --chat-template "$TMP/think.jinja" "${SDEV[@]}" || exit 1
PE=$PID
if command -v node >/dev/null; then
  timeout 60 node tests/server/responses_client.js "http://127.0.0.1:$PORT/v1" "" think >"$TMP/node.out" 2>&1
  grep -E '^(PASS|FAIL) ' "$TMP/node.out" | sed 's/^PASS /PASS openai responses: /; s/^FAIL /FAIL openai responses: /'
  [ "$(grep -cE '^(PASS|FAIL) ' "$TMP/node.out")" -ge 2 ] || fail "openai responses client (think) runs every check" "$(tail -c 400 "$TMP/node.out" | tr '\n' ' ')"
fi
stop_server E "$PE"
