# DeepSeek V3.2 / V4 prompts without a chat template (src/text/dsml.c), end to end on the
# deepseek_v32 fixture (no template in its folder; model_type deepseek_v32) with a small
# byte-fallback tokenizer written here (256 byte tokens + the DeepSeek special tokens, ids
# below the fixture's vocabulary of 300):
#   - `cinfer template` renders requests byte for byte as the official encoder
#     (tests/text/dsml_vectors.json: a tools conversation in thinking and chat mode, the
#     tools given beside the messages as OpenAI requests carry them), a V4 folder and the
#     deepseek_v3_2 alias too; --chat-template still wins; bad messages are one line naming
#     the field;
#   - `generate --chat` and `chat` run without --chat-template;
#   - `serve`: chat completions in chat and thinking mode (prompt_tokens = the tokens of the
#     rendered prompt; thinking opens a reasoning_content), a request with tools, a tool
#     result with no call before it is a 400 naming messages[1], tool_choice "required" starts
#     the reply with the DSML call opening (after the blank line the encoder writes). Prints PASS/FAIL lines.
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
V=tests/text/dsml_vectors.json

# a model folder: the fixture's config and weights, a tokenizer, no chat template
mkfolder() {   # mkfolder DIR FIXTURE
  mkdir -p "$1"
  ln -s "$PWD/tests/fixtures/$2/config.json" "$PWD/tests/fixtures/$2/model.safetensors" "$1/"
  {
    printf '{"version": "1.0", "normalizer": null, "pre_tokenizer": null, "post_processor": null,\n'
    printf ' "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},\n "added_tokens": ['
    local i=256 t
    for t in '<｜begin▁of▁sentence｜>' '<｜end▁of▁sentence｜>' '<｜User｜>' '<｜Assistant｜>' '<think>' '</think>'; do
      [ $i -gt 256 ] && printf ', '
      printf '{"id": %d, "content": "%s", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}' $i "$t"
      i=$((i + 1))
    done
    printf '],\n "model": {"type": "BPE", "unk_token": null, "fuse_unk": false, "byte_fallback": true, "merges": [], "vocab": {'
    for i in $(seq 0 255); do [ $i -gt 0 ] && printf ', '; printf '"<0x%02X>": %d' $i $i; done
    printf ', "<｜begin▁of▁sentence｜>": 256, "<｜end▁of▁sentence｜>": 257, "<｜User｜>": 258, "<｜Assistant｜>": 259, "<think>": 260, "</think>": 261}}}\n'
  } >"$1/tokenizer.json"
  printf '{"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}\n' >"$1/tokenizer_config.json"
}
M=$TMP/v32
mkfolder "$M" deepseek_v32
mkfolder "$TMP/v32alias" deepseek_v32_alias
mkfolder "$TMP/v4" deepseek_v4

# vec ENCODER MODE N: writes $TMP/req.json (the vector's messages as an OpenAI request: the
# system message's tools moved beside them, thinking in chat_template_kwargs) and
# $TMP/want.txt (the official prompt) for the first drop_thinking vector with tools on a
# system message and N messages.
vec() {
  node -e '
    const fs = require("fs"), [f, enc, mode, n, dir] = process.argv.slice(1);
    const v = JSON.parse(fs.readFileSync(f, "utf8")).encode.find(x => x.encoder === enc && x.thinking_mode === mode &&
      x.messages.length === +n && x.messages[0].role === "system" && x.messages[0].tools && x.drop_thinking && !x.reasoning_effort);
    if (!v) process.exit(3);
    const msgs = JSON.parse(JSON.stringify(v.messages)), tools = msgs[0].tools;
    delete msgs[0].tools;
    fs.writeFileSync(dir + "/req.json", JSON.stringify({messages: msgs, tools, add_generation_prompt: true,
      chat_template_kwargs: {thinking: mode === "thinking"}}));
    fs.writeFileSync(dir + "/want.txt", v.prompt);' "$V" "$1" "$2" "$3" "$TMP"
}

# ---- cinfer template: byte for byte as the official encoders
for enc in v32 v4; do
  dir=$M; [ $enc = v4 ] && dir=$TMP/v4
  for mode in thinking chat; do
    if ! vec $enc $mode 10; then fail "template $enc $mode" "no such vector in $V"; continue; fi
    if "$CINFER" template --model "$dir" --request "$TMP/req.json" >"$TMP/got.txt" 2>"$TMP/err" && cmp -s "$TMP/got.txt" "$TMP/want.txt"; then
      pass "template $enc $mode (tools, tool results, reasoning): the official encoder's prompt, $(wc -c <"$TMP/want.txt") bytes"
    else fail "template $enc $mode" "$(head -c 300 "$TMP/err") $(cmp "$TMP/got.txt" "$TMP/want.txt" 2>&1)"; fi
  done
done
vec v32 thinking 10
"$CINFER" template --model "$TMP/v32alias" --request "$TMP/req.json" >"$TMP/got.txt" 2>"$TMP/err" && cmp -s "$TMP/got.txt" "$TMP/want.txt" \
  && pass "template: model_type deepseek_v3_2 takes the V3.2 encoder" || fail "template deepseek_v3_2" "$(head -c 300 "$TMP/err")"
printf '{%% for m in messages %%}[{{ m.role }}]{%% endfor %%}' >"$TMP/own.jinja"
"$CINFER" template --model "$M" --request "$TMP/req.json" --chat-template "$TMP/own.jinja" >"$TMP/got.txt" 2>"$TMP/err"
[ "$(cat "$TMP/got.txt")" = "[system][user][assistant][tool][tool][assistant][user][assistant][tool][assistant]" ] \
  && pass "template: --chat-template wins over the native encoder" || fail "template --chat-template" "$(head -c 200 "$TMP/got.txt") $(head -c 200 "$TMP/err")"
printf '{"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "orphan"}]}' >"$TMP/bad1.json"
expect_err "template: a tool result with no call is refused" "messages[1]" "$CINFER" template --model "$M" --request "$TMP/bad1.json"
printf '{"messages": [{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}]}' >"$TMP/bad2.json"
expect_err "template: an unknown role is refused (V4)" "messages[1].role" "$CINFER" template --model "$TMP/v4" --request "$TMP/bad2.json"
printf '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"thinking": "yes"}}' >"$TMP/bad3.json"
expect_err "template: a bad thinking kwarg is refused" "chat_template_kwargs.thinking" "$CINFER" template --model "$M" --request "$TMP/bad3.json"

# ---- generate --chat and chat: no --chat-template needed
expect_ok "generate --chat on deepseek_v32 without --chat-template" "$CINFER" generate --model "$M" --chat "Hello" --max-tokens 4 --ids
printf 'Hello\nAgain\n' | "$CINFER" chat --model "$M" --max-tokens 4 --stats >"$TMP/chat.out" 2>"$TMP/chat.err"
rc=$?
[ $rc = 0 ] && [ "$(grep -c 'from the cache' "$TMP/chat.err")" = 2 ] \
  && pass "chat on deepseek_v32 without --chat-template: two turns" || fail "chat deepseek_v32" "exit $rc: $(head -c 300 "$TMP/chat.err")"

# ---- serve
start_server deepseek_v32 --model "$M" --ctx 4096 || exit 0   # the model folder has no chat template
post() { STATUS=$(curl -s -m 60 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$1" "http://127.0.0.1:$PORT/v1/chat/completions"); }
js() { node -e 'const fs=require("fs");let o;try{o=JSON.parse(fs.readFileSync(process.argv[1],"utf8"))}catch(e){o=null};console.log(eval(process.argv[2]))' "$TMP/body" "$1"; }
expect() {   # expect NAME STATUS JS_CONDITION
  if [ "$STATUS" != "$2" ]; then fail "$1" "status $STATUS, want $2: $(head -c 300 "$TMP/body")"
  elif [ "$(js "!!($3)")" != true ]; then fail "$1" "condition $3 on $(head -c 300 "$TMP/body")"
  else pass "$1"; fi
}
ntok() {       # ntok REQUEST_FILE: the token count of the prompt `cinfer template` renders
  "$CINFER" template --model "$M" --request "$1" >"$TMP/p.txt" && "$CINFER" tokenize --model "$M" --file "$TMP/p.txt" | wc -w
}
CHAT='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0'
printf '%s}' "$CHAT" >"$TMP/c.json"
post "$(cat "$TMP/c.json")"
expect "serve: chat mode" 200 "o.usage.prompt_tokens === $(ntok "$TMP/c.json") && o.choices[0].message.reasoning_content === undefined"
printf '%s, "chat_template_kwargs": {"thinking": true}}' "$CHAT" >"$TMP/t.json"
post "$(cat "$TMP/t.json")"
expect "serve: thinking mode (the reply opens in reasoning_content)" 200 \
  "o.usage.prompt_tokens === $(ntok "$TMP/t.json") && typeof o.choices[0].message.reasoning_content === 'string'"
TOOLS='[{"type": "function", "function": {"name": "now", "description": "The time", "parameters": {"type": "object", "properties": {}}}}]'
printf '%s, "tools": %s}' "$CHAT" "$TOOLS" >"$TMP/w.json"
post "$(cat "$TMP/w.json")"
expect "serve: a request with tools" 200 "o.usage.prompt_tokens === $(ntok "$TMP/w.json")"
post '{"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "orphan"}], "max_tokens": 2}'
expect "serve: a tool result with no call is a 400 naming it" 400 "o.error && o.error.message.includes('messages[1]')"
printf '%s, "tools": %s, "tool_choice": "required"}' "$CHAT" "$TOOLS" >"$TMP/r.json"
post "$(cat "$TMP/r.json")"
expect "serve: tool_choice required starts the reply with the DSML call" 200 \
  "o.choices[0].finish_reason === 'tool_calls' ? o.choices[0].message.tool_calls[0].function.name === 'now' : (o.choices[0].message.content || '').startsWith('\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"')"
stop_server deepseek_v32 "$PID"
