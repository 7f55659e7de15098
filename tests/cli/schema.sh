# Structured outputs of `cinfer serve` (issue #21), end to end with the embedded demo model.
#
# Server A (--parallel 4): tests/server/schema_fuzz.js sends 18 schemas (every supported
# keyword: types and type lists, required / optional / additionalProperties false, enum /
# const, prefixItems / items / minItems / maxItems, string lengths, patterns, the formats,
# number bounds, anyOf / oneOf / allOf, $ref recursion, non-object roots) x 5 seeds (2 on
# the ASan build) at
# temperature 1 as response_format json_schema; every reply must finish "stop", parse and
# pass ajv (draft 2020-12 + ajv-formats); then 200 (80 on ASan) random schemas, one seeded
# request each: a refusal is a one-line 400, a reply that finishes passes ajv. Then a
# streamed reply, and the refusals: every
# bad schema is a 400 with one line naming the field and the keyword (unsupported keywords,
# malformed schemas, a bad pattern, a $ref to nowhere, overlapping oneOf, hostile nesting).
# Server B (the demo model with Qwen3's chat
# template, which frames tool calls): tools declared strict under tool_choice required, a
# named function and auto; every call's arguments pass ajv against the function's
# parameters; a strict tool's bad parameters are a 400 naming 'tools', json_schema with a
# required tool call a 400 naming response_format. Servers stop on
# SIGTERM with a clean stderr (this script also runs on the ASan/UBSan build).
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
SEEDS=5; case "$CINFER" in *asan*) SEEDS=2 ;; esac   # the sanitizer build runs the demo model ~10x slower

req() {
  STATUS=$(curl -s -m 60 -X POST -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$1" \
           "http://127.0.0.1:$PORT/v1/chat/completions")
}
js() { node -e 'const fs=require("fs");let o;try{o=JSON.parse(fs.readFileSync(process.argv[1],"utf8"))}catch(e){o=null};console.log(eval(process.argv[2]))' "$TMP/body" "$1"; }
# refused NAME PARAM NEEDLE BODY: a 400 whose one-line message names PARAM and contains NEEDLE
refused() {
  req "$4"
  if [ "$STATUS" != 400 ]; then fail "$1" "status $STATUS, want 400: $(head -c 300 "$TMP/body")"
  elif [ "$(node -e 'const fs=require("fs");let o={};try{o=JSON.parse(fs.readFileSync(process.argv[1],"utf8"))}catch(e){}
      const m=o.error&&o.error.message;console.log(o.error&&o.error.param===process.argv[2]&&typeof m==="string"&&m.includes(process.argv[3])&&!m.includes("\n"))' \
      "$TMP/body" "$2" "$3")" != true ]; then
    fail "$1" "want param $2 and '$3' in $(head -c 300 "$TMP/body")"
  else pass "$1"; fi
}
rf() { echo "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":8,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":$1}}"; }

if bash tests/server/setup_npm.sh >"$TMP/npm.log" 2>&1; then pass "npm packages (openai, ajv, ajv-formats) installed"
else fail "npm packages installed" "$(tail -3 "$TMP/npm.log")"; fi

# ---------------------------------------------------------------- server A: json_schema
start_server A --parallel 4 || exit 1
PA=$PID
if [ -f .cache/npm/node_modules/ajv/package.json ]; then
  timeout 400 node tests/server/schema_fuzz.js "http://127.0.0.1:$PORT/v1" json_schema $SEEDS >"$TMP/node.out" 2>&1
  grep -E '^(PASS|FAIL) ' "$TMP/node.out"
  grep -qE '^(PASS|FAIL) json_schema: ' "$TMP/node.out" || fail "schema_fuzz.js json_schema runs" "$(tail -c 400 "$TMP/node.out")"
fi

# random schemas (a seeded generator over the keywords, supported or not), one request each
if [ -f .cache/npm/node_modules/ajv/package.json ]; then
  timeout 300 node tests/server/schema_fuzz.js "http://127.0.0.1:$PORT/v1" random $((SEEDS * 40)) >"$TMP/node.out" 2>&1
  grep -E '^(PASS|FAIL) ' "$TMP/node.out"
  grep -qE '^(PASS|FAIL) random schemas' "$TMP/node.out" || fail "schema_fuzz.js random runs" "$(tail -c 400 "$TMP/node.out")"
fi

# streamed: the deltas make the same kind of reply
SCH='{"name":"s","strict":true,"schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":5},"w":{"type":"string","maxLength":6}},"required":["n","w"],"additionalProperties":false}}'
curl -s -m 60 -N -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/chat/completions" \
  -d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":300,\"temperature\":1,\"seed\":9,\"stream\":true,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":$SCH}}" >"$TMP/sse"
r=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | node -e 'let t="",fin=null;require("readline").createInterface({input:process.stdin}).on("line",l=>{const c=JSON.parse(l).choices[0];if(c.delta.content)t+=c.delta.content;if(c.finish_reason)fin=c.finish_reason}).on("close",()=>{let v;try{v=JSON.parse(t)}catch(e){}console.log(fin==="stop"&&v&&Number.isInteger(v.n)&&v.n>=1&&v.n<=5&&typeof v.w==="string"&&[...v.w].length<=6&&Object.keys(v).length===2)})')
if [ "$r" = true ]; then pass "json_schema streamed: the deltas join into a valid reply"; else fail "json_schema streamed" "$(head -c 400 "$TMP/sse")"; fi

refused "unsupported keyword is 400 naming it and where" response_format "unsupported keyword 'not' at #/properties/a" "$(rf '{"name":"x","schema":{"type":"object","properties":{"a":{"not":{"type":"null"}}}}}')"
refused "multipleOf is 400" response_format "unsupported keyword 'multipleOf'" "$(rf '{"name":"x","schema":{"type":"integer","multipleOf":3}}')"
refused "uniqueItems is 400" response_format "'uniqueItems'" "$(rf '{"name":"x","schema":{"type":"array","uniqueItems":true}}')"
refused "an unknown format is 400" response_format "'format' 'hostname'" "$(rf '{"name":"x","schema":{"type":"string","format":"hostname"}}')"
refused "a pattern with lookahead is 400" response_format "lookaround" "$(rf '{"name":"x","schema":{"type":"string","pattern":"^(?!x)"}}')"
refused "a malformed pattern is 400" response_format "unbalanced" "$(rf '{"name":"x","schema":{"type":"string","pattern":"(ab"}}')"
refused "a \$ref to nowhere is 400" response_format "points to nothing" "$(rf '{"name":"x","schema":{"$ref":"#/$defs/none"}}')"
refused "overlapping oneOf is 400" response_format "'oneOf' alternatives 0 and 1" "$(rf '{"name":"x","schema":{"oneOf":[{"type":"number"},{"type":"integer"}]}}')"
refused "a schema that is not an object is 400" response_format "'response_format.json_schema.schema'" "$(rf '{"name":"x","schema":"object"}')"
refused "json_schema without a schema is 400" response_format "'response_format.json_schema.schema'" "$(rf '{"name":"x"}')"
refused "json_schema that is not an object is 400" response_format "'json_schema' object" '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":[1]}}'
refused "a bad type name is 400" response_format "'type'" "$(rf '{"name":"x","schema":{"type":"strnig"}}')"
refused "minLength above maxLength is 400" response_format "'minLength'" "$(rf '{"name":"x","schema":{"type":"string","minLength":3,"maxLength":1}}')"
deep=$(node -e 'let s="{}";for(let i=0;i<900;i++)s=`{"type":"array","items":${s}}`;console.log(s)')
refused "hostile nesting depth is 400" response_format "nested deeper than 64" "$(rf "{\"name\":\"x\",\"schema\":$deep}")"
stop_server A "$PA"

# ---------------------------------------------------------------- server B: strict tools
if [ -f .cache/tokenizers/qwen3/tokenizer_config.json ] && [ -f .cache/npm/node_modules/ajv/package.json ]; then
  node -e 'const fs=require("fs");fs.writeFileSync(process.argv[2],JSON.parse(fs.readFileSync(process.argv[1],"utf8")).chat_template)' \
    .cache/tokenizers/qwen3/tokenizer_config.json "$TMP/qwen3.jinja"
  start_server B --parallel 4 --chat-template "$TMP/qwen3.jinja" || exit 1
  PB=$PID
  timeout 300 node tests/server/schema_fuzz.js "http://127.0.0.1:$PORT/v1" tools $SEEDS >"$TMP/node.out" 2>&1
  grep -E '^(PASS|FAIL) ' "$TMP/node.out"
  grep -qE '^(PASS|FAIL) strict tools, tool_choice auto' "$TMP/node.out" || fail "schema_fuzz.js tools runs" "$(tail -c 400 "$TMP/node.out")"
  refused "a strict tool with an unsupported keyword is 400 naming 'tools'" tools "'tools[0].function.parameters': unsupported keyword 'dependentRequired'" \
    '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","dependentRequired":{}}}}]}'
  refused "json_schema with a required tool call is 400" response_format "json_schema cannot be combined" \
    '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"required","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}'
  refused "strict that is not a boolean is 400" tools "'tools[0].function.strict'" \
    '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","strict":"yes","parameters":{}}}]}'
  stop_server B "$PB"
else
  echo "SKIP strict tools: .cache/tokenizers/qwen3 (scripts/fetch-tokenizers.sh) or ajv missing"
fi
