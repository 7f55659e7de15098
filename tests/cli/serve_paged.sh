# `cinfer serve` with a paged family on the CPU (src/server/engine.h "Paged caches"): qwen3_tied
# (a copy with the demo model's tokenizer beside it) on a pool of 6 blocks of 128 tokens, 4 slots.
#  - the start-up line names the pool; /metrics has it (blocks, used, cached, waits, preemptions);
#  - a request whose prompt + max_tokens need 8 blocks is a 400 naming the blocks;
#  - 4 concurrent requests of 100 prompt ids generating 300 each (1 block each to start, 4 at
#    the end: 16 of 6) all complete, each equal to the same request alone (greedy, token ids;
#    the CPU's batched and lone steps are bit-identical, and a preempted request recomputes
#    its ids; on a device it feeds them again as decode steps: cinfer_replay_tokens_total,
#    0 on the CPU), with at least one preemption; idle afterwards, no block is in use;
#  - a second turn that extends a first one's prompt takes those rows from the pool, its full
#    blocks and its last (cached_tokens);
#  - bad --kv-blocks / --gpu-memory / --prefill-chunk values exit 2 with one line.
# The server stops on SIGTERM with a clean stderr (this also runs on the ASan/UBSan build).
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT

M=$TMP/qwen3_tied
cp -r tests/fixtures/qwen3_tied "$M" && cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$M/"

expect_usage "serve --kv-blocks 0 is a usage error" "--kv-blocks expects an integer" "$CINFER" serve --model "$M" --kv-blocks 0
expect_usage "serve --gpu-memory 1.5 is a usage error" "--gpu-memory expects a fraction in (0, 1]" "$CINFER" serve --model "$M" --gpu-memory 1.5
expect_usage "serve --prefill-chunk 100 is a usage error" "--prefill-chunk expects a power of two" "$CINFER" serve --model "$M" --prefill-chunk 100

# SERVE_DEVICE=cuda (the GPU suite, tests/gpu/run.sh): the same on the device
start_server pg --model "$M" --parallel 4 --ctx 1024 --kv-blocks 6 --prefill-chunk 128 ${SERVE_DEVICE:+--device "$SERVE_DEVICE"} || exit 0
if grep -q "cache pool of 6 blocks of 128 tokens" "$TMP/pg.err"; then pass "start-up line names the pool"
else fail "start-up line names the pool" "$(head -3 "$TMP/pg.err")"; fi
metric() { curl -s -m 10 "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
[ "$(metric cinfer_kv_blocks)" = 6 ] && [ "$(metric cinfer_kv_blocks_used)" = 0 ] && pass "/metrics: 6 blocks, none used" ||
  fail "/metrics: 6 blocks, none used" "blocks $(metric cinfer_kv_blocks), used $(metric cinfer_kv_blocks_used)"

ids() { # N SEED: N token ids below 300, comma-separated
  awk -v n="$1" -v s="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? "," : "", (s * 131 + i * 17 + 1) % 300 }'
}
complete() { # OUT PROMPT_IDS MAX: a greedy /v1/completions, the body in OUT, the status printed
  curl -s -m 120 -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\": [$2], \"max_tokens\": $3, \"temperature\": 0, \"ignore_eos\": true}" \
    "http://127.0.0.1:$PORT/v1/completions"
}

st=$(complete "$TMP/big" "$(ids 700 1)" 200)
if [ "$st" = 400 ] && grep -q "need 8 cache blocks of 128 tokens; the pool has 6" "$TMP/big"; then pass "a request that never fits the pool is a 400"
else fail "a request that never fits the pool is a 400" "status $st: $(head -c 300 "$TMP/big")"; fi

for i in 1 2 3 4; do complete "$TMP/solo$i" "$(ids 100 $((i + 10)))" 300 >"$TMP/solo$i.st"; done
cp=(); t0=$SECONDS
for i in 1 2 3 4; do complete "$TMP/both$i" "$(ids 100 $((i + 10)))" 300 >"$TMP/both$i.st" & cp+=($!); done
wait "${cp[@]}"   # the curls (the server is a background job too)
secs=$((SECONDS - t0))
# JSON fields with node (what the project installs), else python3 (the GPU machine has no node)
jfield() { # FILE EXPR: EXPR over the parsed body o, printed (text and count as a JSON pair)
  if command -v node >/dev/null; then
    node -e "const o = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8')); console.log($2)" "$1" 2>/dev/null
  else
    python3 -c "import json, sys; o = json.load(open(sys.argv[1])); print($3)" "$1" 2>/dev/null
  fi
}
text() { jfield "$1" 'JSON.stringify([o.choices[0].text, o.usage.completion_tokens])' \
  'json.dumps([o["choices"][0]["text"], o["usage"]["completion_tokens"]], separators=(",", ":"))'; }
same=1
for i in 1 2 3 4; do
  a=$(text "$TMP/solo$i"); b=$(text "$TMP/both$i")
  { [ "$(cat "$TMP/both$i.st")" = 200 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [[ "$a" == *",300]" ]]; } || { same=0; echo "request $i: status $(cat "$TMP/both$i.st") after ${secs}s, solo $a, concurrent $b" >&2; }
done
[ $same = 1 ] && pass "4 growing requests on 6 blocks each equal the request alone" || fail "4 growing requests on 6 blocks each equal the request alone" "see above"
pre=$(metric cinfer_preemptions_total)
[ "${pre:-0}" -ge 1 ] 2>/dev/null && pass "the pool ran dry: $pre preemption(s)" || fail "the pool ran dry" "preemptions '$pre'"
# a preempted request's ids: fed again as decode steps on a device (its prefill and decode
# differ in the last bits), recomputed by the prefill on the CPU (the same bits, faster)
rep=$(metric cinfer_replay_tokens_total)
if [ -n "${SERVE_DEVICE:-}" ]; then
  [ "${rep:-0}" -ge 1 ] 2>/dev/null && pass "on the device the preempted ids are replayed: $rep" || fail "on the device the preempted ids are replayed" "replayed '$rep'"
else
  [ "$rep" = 0 ] && pass "on the CPU the preempted ids are prefilled" || fail "on the CPU the preempted ids are prefilled" "replayed '$rep'"
fi
for _ in $(seq 1 50); do [ "$(metric cinfer_kv_blocks_used)" = 0 ] && break; sleep 0.1; done
[ "$(metric cinfer_kv_blocks_used)" = 0 ] && pass "idle: no block in use" || fail "idle: no block in use" "$(metric cinfer_kv_blocks_used)"

p1=$(ids 300 7)
complete "$TMP/t1" "$p1" 8 >/dev/null
st=$(complete "$TMP/t2" "$p1,$(ids 40 8)" 8)
cached=$(jfield "$TMP/t2" 'o.usage.prompt_tokens_details.cached_tokens' 'o["usage"]["prompt_tokens_details"]["cached_tokens"]')
tails=$(metric cinfer_kv_tail_hits_total)
[ "${tails:-0}" -ge 1 ] 2>/dev/null && pass "/metrics counts the last block gone on from: $tails" || fail "/metrics counts the last block gone on from" "cinfer_kv_tail_hits_total '$tails'"
[ "$st" = 200 ] && [ "$cached" = 300 ] && pass "a second turn takes the first one's 300 prompt rows from the pool (2 full blocks and its last)" || fail "a second turn takes the first one's prompt rows from the pool" "status $st, cached '$cached'"
stop_server pg "$PID"
