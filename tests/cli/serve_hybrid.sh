# `cinfer serve` with a hybrid (Qwen3.5: gated DeltaNet + gated attention) on the block pool,
# through the chat API: a random checkpoint of the qwen3_5 fixture's shape with the demo
# model's 4096-id vocabulary (make-random), the demo tokenizer and chat template beside it.
#  - the start-up line gives the prefix store and the size of one snapshot of the states;
#  - two chats that share a long system message and part after it: the first snapshots its
#    states where the system message ends (the API layer finds it: the template's rendering
#    of the system message alone is a prefix of the prompt), so the second takes at least
#    that many tokens from the cache (cached_tokens), where without that snapshot it could
#    take none (no states within the shared blocks);
#  - a third chat that repeats the second with another last message still reuses it.
# The server stops on SIGTERM with a clean stderr (this also runs on the ASan/UBSan build).
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT

sed 's/"vocab_size": 300/"vocab_size": 4096/' tests/fixtures/qwen3_5/config.json > "$TMP/config.json"
M=$TMP/q35
if ! "$CINFER" make-random --config "$TMP/config.json" --out "$M" --seed 3 > "$TMP/make.log" 2>&1; then
  fail "make-random of a 4096-id qwen3_5" "$(tail -2 "$TMP/make.log")"; exit 0
fi
cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$M/"
[ -f models/demo/chat_template.jinja ] && cp models/demo/chat_template.jinja "$M/"

start_server hy --model "$M" --parallel 2 --ctx 2048 --prefill-chunk 256 || exit 0
if grep -q "prefix store 256 MiB (snapshots of the states, " "$TMP/hy.err"; then pass "start-up line gives the prefix store and a snapshot's size"
else fail "start-up line gives the prefix store and a snapshot's size" "$(head -2 "$TMP/hy.err")"; fi

sys=$(awk 'BEGIN { for (i = 0; i < 120; i++) printf "rule %d: answer in plain words and keep to the facts. ", i }')
chat() { # OUT USER: a greedy chat with the system message, the body in OUT, the status printed
  curl -s -m 120 -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "{\"messages\": [{\"role\": \"system\", \"content\": \"$sys\"}, {\"role\": \"user\", \"content\": \"$2\"}], \"max_tokens\": 4, \"temperature\": 0}" \
    "http://127.0.0.1:$PORT/v1/chat/completions"
}
jfield() { # FILE EXPR (node) EXPR (python3)
  if command -v node >/dev/null; then
    node -e "const o = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8')); console.log($2)" "$1" 2>/dev/null
  else
    python3 -c "import json, sys; o = json.load(open(sys.argv[1])); print($3)" "$1" 2>/dev/null
  fi
}
cached() { jfield "$1" 'o.usage.prompt_tokens_details.cached_tokens' 'o["usage"]["prompt_tokens_details"]["cached_tokens"]'; }
prompt() { jfield "$1" 'o.usage.prompt_tokens' 'o["usage"]["prompt_tokens"]'; }
st1=$(chat "$TMP/c1" "What is the capital of France?")
st2=$(chat "$TMP/c2" "Name three rivers of Europe, please, with their lengths.")
c2=$(cached "$TMP/c2"); n2=$(prompt "$TMP/c2"); n1=$(prompt "$TMP/c1")
# the system message alone is most of both prompts: the second chat takes at least 90% of the shorter one
[ "$st1" = 200 ] && [ "$st2" = 200 ] && [ "${c2:-0}" -ge $((n1 * 9 / 10)) ] 2>/dev/null && [ "$c2" -lt "$n2" ] &&
  pass "a second chat takes the shared system message from the cache: $c2 of $n2 (first chat $n1)" ||
  fail "a second chat takes the shared system message from the cache" "status $st1 / $st2, cached '$c2' of '$n2' (first $n1)"
st3=$(chat "$TMP/c3" "Name three mountains of Asia.")
c3=$(cached "$TMP/c3")
[ "$st3" = 200 ] && [ "${c3:-0}" -ge $((n1 * 9 / 10)) ] 2>/dev/null && pass "a third chat too: $c3" ||
  fail "a third chat takes the shared system message from the cache" "status $st3, cached '$c3'"
stop_server hy "$PID"
