# generate with text in and text out: a tiny random-weight Qwen3 with the real Qwen3
# tokenizer (scripts/fetch-tokenizers.sh) — checks the wiring: prompt encoding, chat
# template, streamed decode, and that text output equals detokenizing the --ids output.
. "$(dirname "$0")/lib.sh"
tk=.cache/tokenizers/qwen3
if [ ! -f $tk/tokenizer.json ]; then fail "tokenizer files" "run scripts/fetch-tokenizers.sh"; exit 0; fi
cat >"$TMP/cfg.json" <<'CFG'
{"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 64, "intermediate_size": 96,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "rope_theta": 1000000, "tie_word_embeddings": true, "eos_token_id": 151645, "rms_norm_eps": 1e-6}
CFG
m="$TMP/m"
expect_ok "make-random tiny qwen3" $CINFER make-random --config "$TMP/cfg.json" --out "$m" --dtype bf16 --seed 9
cp $tk/tokenizer.json $tk/tokenizer_config.json "$m/"
ids=$($CINFER generate --model "$m" --prompt "Hello there" --max-tokens 6 --ids 2>"$TMP/err")
[ -n "$ids" ] && pass "generate --prompt --ids" || fail "generate --prompt --ids" "$(cat "$TMP/err")"
txt=$($CINFER generate --model "$m" --prompt "Hello there" --max-tokens 6 2>"$TMP/err")
ref=$($CINFER detokenize --model "$m" --ids "$ids" --skip-special 2>>"$TMP/err")
[ "$txt" = "$ref" ] && pass "generate text == detokenize(ids)" || fail "generate text == detokenize(ids)" "'$txt' vs '$ref' $(cat "$TMP/err")"
out=$($CINFER generate --model "$m" --chat "What is 2+2?" --max-tokens 4 --ids 2>"$TMP/err")
[ -n "$out" ] && pass "generate --chat" || fail "generate --chat" "$(cat "$TMP/err")"
# --chat-template: the folder's own template from a file gives the same prompt; another
# template another prompt; a missing file is one line naming it
node -e 'const fs=require("fs");fs.writeFileSync(process.argv[2],JSON.parse(fs.readFileSync(process.argv[1],"utf8")).chat_template)' \
  $tk/tokenizer_config.json "$TMP/own.jinja"
printf '%s' "{{ messages[0]['content'] }}" >"$TMP/bare.jinja"
own=$($CINFER generate --model "$m" --chat "What is 2+2?" --max-tokens 4 --ids --chat-template "$TMP/own.jinja" 2>"$TMP/err")
[ -n "$out" ] && [ "$own" = "$out" ] && pass "generate --chat-template (the folder's own template)" || fail "generate --chat-template" "'$own' vs '$out' $(cat "$TMP/err")"
bare=$($CINFER generate --model "$m" --chat "Hello there" --max-tokens 6 --ids --chat-template "$TMP/bare.jinja" 2>"$TMP/err")
[ -n "$bare" ] && [ "$bare" = "$ids" ] && pass "generate --chat-template (a bare template = --prompt)" || fail "generate --chat-template bare" "'$bare' vs '$ids' $(cat "$TMP/err")"
tpl=$($CINFER template --model "$m" --request <(echo '{"messages":[{"role":"user","content":"hey"}]}') --chat-template "$TMP/bare.jinja" 2>"$TMP/err")
[ "$tpl" = "hey" ] && pass "template --chat-template" || fail "template --chat-template" "'$tpl' $(cat "$TMP/err")"
expect_err "generate --chat-template of a missing file" "nope.jinja" $CINFER generate --model "$m" --chat hi --chat-template "$TMP/nope.jinja"
expect_err "two prompts"  "exactly one of --prompt-ids, --prompt or --chat" $CINFER generate --model "$m" --prompt a --chat b
expect_err "no tokenizer" "tokenizer.json" $CINFER generate --model tests/fixtures/qwen3_tied --prompt "hi"
