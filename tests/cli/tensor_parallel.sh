# --tp N / --ep (the model split over N tensor-parallel ranks, threads of this process): greedy
# ids of generate equal the whole model's on a dense, an MoE (columns split and expert parallel),
# an MLA and a hybrid fixture; logits --tp 2 within 2e-5 of the whole model's largest logit
# (every value compared); bench --tp runs, with --batch too; chat --tp 2 (two turns, the
# second continuing the first in its slot) and serve --tp 2 (two concurrent greedy requests:
# batch steps) answer as without on the demo model; what cannot split (heads over the ranks),
# --tp out of range and --ep without --tp end in one line each.
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT

gen() { $CINFER generate --model "$1" --prompt-ids 5,17,42,99,3 --max-tokens 12 --ids --threads 2 "${@:2}" 2>"$TMP/err"; }
for case in "qwen3_bf16 --tp 2" "qwen3_bf16 --tp 4" "qwen3_moe --tp 2" "qwen3_moe --tp 2 --ep" "qwen3_moe --tp 4 --ep" \
            "deepseek_v3 --tp 2" "qwen3_5 --tp 2" "nemotron_h --tp 2 --ep"; do
  set -- $case
  fx=tests/fixtures/$1; shift
  whole=$(gen $fx) || { fail "generate $case" "whole: $(cat "$TMP/err")"; continue; }
  split=$(gen $fx "$@") || { fail "generate $case" "$(cat "$TMP/err")"; continue; }
  if [ -n "$whole" ] && [ "$whole" = "$split" ]; then pass "generate $case: greedy ids as the whole model"
  else fail "generate $case" "whole '$whole' split '$split'"; fi
done

fx=tests/fixtures/deepseek_v32
expect_ok "logits whole" $CINFER logits --model $fx --tokens 5,17,42,99,3,250 --out "$TMP/whole.f32" --threads 2
expect_ok "logits --tp 2" $CINFER logits --model $fx --tokens 5,17,42,99,3,250 --out "$TMP/split.f32" --threads 2 --tp 2
# every float of both files side by side (od: coreutils): max |diff| against 2e-5 of the largest
od -An -v -f -w4 "$TMP/whole.f32" >"$TMP/a"; od -An -v -f -w4 "$TMP/split.f32" >"$TMP/b"
if [ -s "$TMP/a" ] && [ "$(wc -l <"$TMP/a")" -eq "$(wc -l <"$TMP/b")" ] &&
   paste "$TMP/a" "$TMP/b" | awk '{ d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; if (d > md) md = d; if (m > mm) mm = m }
       END { if (mm < 1) mm = 1; exit !(md <= 2e-5 * mm) }'; then pass "logits --tp 2 within 2e-5 of the whole model's"
else fail "logits --tp 2" "max |diff| over 2e-5 of the largest logit: $(paste "$TMP/a" "$TMP/b" | head -3)"; fi

expect_ok "bench --tp 2" $CINFER bench --model tests/fixtures/qwen3_moe --prompt-len 6 --gen 3 --tp 2 --threads 2
if grep -Eq "^decode +3 tokens in " "$TMP/out"; then pass "bench --tp 2 output"; else fail "bench --tp 2 output" "$(cat "$TMP/out")"; fi
expect_ok "bench --tp 2 --batch 2" $CINFER bench --model tests/fixtures/qwen3_moe --prompt-len 6 --gen 3 --tp 2 --batch 2 --threads 2
if grep -Eq "^decode batch 6 tokens in [0-9.]+ s = [0-9.]+ tok/s \(2 sequences x 3 steps\)$" "$TMP/out"; then
  pass "bench --tp 2 --batch 2 output"; else fail "bench --tp 2 --batch 2 output" "$(cat "$TMP/out")"; fi
expect_err "generate --tp 3 on 4 heads" "model.layers.0 over 3 ranks: 4 attention heads do not split over 3 ranks" \
  $CINFER generate --model tests/fixtures/qwen3_bf16 --prompt-ids 5,17 --max-tokens 2 --ids --tp 3
expect_usage "generate --tp 0" "generate: --tp expects an integer in [1, 64], got '0'" \
  $CINFER generate --model tests/fixtures/qwen3_bf16 --prompt-ids 5 --tp 0
expect_usage "generate --tp 65" "--tp expects an integer in [1, 64]" $CINFER generate --model tests/fixtures/qwen3_bf16 --prompt-ids 5 --tp 65
expect_usage "generate --ep alone" "generate: --ep needs --tp N (N >= 2)" \
  $CINFER generate --model tests/fixtures/qwen3_moe --prompt-ids 5 --ep
expect_err "generate --tp 2 --device cuda" "tensor parallel runs on the CPU here" \
  $CINFER generate --model tests/fixtures/qwen3_bf16 --prompt-ids 5 --ids --tp 2 --device cuda

turns='Hello there
What is two plus two?'
printf '%s\n' "$turns" | $CINFER chat --max-tokens 10 --threads 2 >"$TMP/chat1" 2>"$TMP/chat1.err"
printf '%s\n' "$turns" | $CINFER chat --max-tokens 10 --threads 2 --tp 2 >"$TMP/chat2" 2>"$TMP/chat2.err"
if [ -s "$TMP/chat1" ] && cmp -s "$TMP/chat1" "$TMP/chat2"; then pass "chat --tp 2: the replies of the whole model"
else fail "chat --tp 2" "$(head -c 300 "$TMP/chat1") / $(head -c 300 "$TMP/chat2") $(cat "$TMP/chat2.err")"; fi
expect_usage "chat --ep alone" "chat: --ep needs --tp N (N >= 2)" $CINFER chat --ep

req() { # PORT OUT CONTENT
  curl -s -m 60 -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "{\"messages\": [{\"role\": \"user\", \"content\": \"$3\"}], \"max_tokens\": 10, \"temperature\": 0}" \
    "http://127.0.0.1:$1/v1/chat/completions"
}
content() { grep -o '"content":"[^"]*"' "$1" | head -1; }
start_server whole --threads 2 --parallel 2 && P1=$PORT && W1=$PID &&
start_server split --threads 2 --parallel 2 --tp 2 && P2=$PORT && W2=$PID && {
  req "$P1" "$TMP/w_a" "Hello there" >"$TMP/w_a.st" & a=$!; req "$P1" "$TMP/w_b" "Name a river." >"$TMP/w_b.st" & b=$!
  wait $a $b
  req "$P2" "$TMP/s_a" "Hello there" >"$TMP/s_a.st" & a=$!; req "$P2" "$TMP/s_b" "Name a river." >"$TMP/s_b.st" & b=$!
  wait $a $b
  if [ "$(cat "$TMP/s_a.st" "$TMP/s_b.st")" = "200200" ] && [ -n "$(content "$TMP/w_a")" ] &&
     [ "$(content "$TMP/w_a")" = "$(content "$TMP/s_a")" ] && [ "$(content "$TMP/w_b")" = "$(content "$TMP/s_b")" ]; then
    pass "serve --tp 2: two concurrent greedy requests answer as the whole model"
  else fail "serve --tp 2" "$(cat "$TMP/s_a.st" "$TMP/s_b.st") $(content "$TMP/w_a") / $(content "$TMP/s_a"); $(content "$TMP/w_b") / $(content "$TMP/s_b")"; fi
  stop_server whole "$W1"
  stop_server split "$W2"
}
expect_usage "serve --ep alone" "serve: --ep needs --tp N (N >= 2)" $CINFER serve --ep
