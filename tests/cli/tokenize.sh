#!/usr/bin/env bash
# tokenize / detokenize end to end on two real tokenizers (qwen3: byte-level BPE with
# special tokens; llama2: SentencePiece-style BPE with byte fallback), against the ids in
# tests/text/ref/ (made by Hugging Face tokenizers), plus round trips and bad input.
# The tokenizer folders come from scripts/fetch-tokenizers.sh (.cache/tokenizers/).
cd "$(dirname "$0")/../.." || exit 1
. tests/cli/lib.sh

# expect_code NAME CODE SUBSTRING CMD...: like expect_err, and the exit status must be CODE.
expect_code() {
  local name=$1 code=$2 want=$3; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ $rc -ne "$code" ]; then fail "$name" "exit status $rc, want $code; stderr: $(head -c 300 "$TMP/err")"
  elif [ "$(wc -l <"$TMP/err")" -ne 1 ]; then fail "$name" "expected one stderr line: $(head -c 300 "$TMP/err")"
  elif ! grep -qF -- "$want" "$TMP/err"; then fail "$name" "stderr lacks '$want': $(cat "$TMP/err")"
  else pass "$name"; fi
}

Q=.cache/tokenizers/qwen3
L=.cache/tokenizers/llama2
for d in $Q $L; do
  if [ ! -f "$d/tokenizer.json" ]; then fail "tokenizer files" "$d is missing: run scripts/fetch-tokenizers.sh first"; exit 1; fi
done
"$CINFER" tokenize >"$TMP/out" 2>"$TMP/err"
if grep -q "unknown command" "$TMP/err"; then
  fail "tokenize command" "$CINFER has no tokenize command: wire cmd_tokenize/cmd_detokenize (apps/cmd_text.h) into apps/cinfer.c"
  exit 1
fi

# Corpus text 0 is "Hello world": its ids are the first "ids" / "ids_special" in each ref.
printf 'Hello world' >"$TMP/hello.txt"
for name in qwen3 llama2; do
  d=.cache/tokenizers/$name ref=tests/text/ref/$name.json
  want=$(json_ids "$ref" ids | head -1 | tr ',' ' ')
  got=$("$CINFER" tokenize --model "$d" --file "$TMP/hello.txt" 2>"$TMP/err")
  [ "$got" = "$want" ] && pass "tokenize $name" || fail "tokenize $name" "got '$got' want '$want' $(cat "$TMP/err")"
  want_sp=$(json_ids "$ref" ids_special | head -1 | tr ',' ' ')
  [ -n "$want_sp" ] || want_sp=$want
  got=$("$CINFER" tokenize --model "$d" --file "$TMP/hello.txt" --add-special 2>"$TMP/err")
  [ "$got" = "$want_sp" ] && pass "tokenize --add-special $name" || fail "tokenize --add-special $name" "got '$got' want '$want_sp'"
  ids=$(json_ids "$ref" ids | head -1)
  got=$("$CINFER" detokenize --model "$d" --ids "$ids" 2>"$TMP/err")
  [ "$got" = "Hello world" ] && pass "detokenize $name" || fail "detokenize $name" "got '$got' $(cat "$TMP/err")"
done

# Round trips through files with special tokens, CJK, emoji, tabs and newlines.
printf '<|im_start|>user\n你好, world! 😀 123\n\tx = "y";<|im_end|>\n' >"$TMP/mixed.txt"
for d in $Q $L; do
  name=$(basename "$d")
  if ids=$("$CINFER" tokenize --model "$d" --file "$TMP/mixed.txt" 2>"$TMP/err"); then
    "$CINFER" detokenize --model "$d" --ids "$(echo "$ids" | tr ' ' ',')" >"$TMP/back.txt" 2>"$TMP/err"
    cmp -s "$TMP/mixed.txt" "$TMP/back.txt" && pass "round trip $name" || fail "round trip $name" "text differs: $(head -c 200 "$TMP/back.txt")"
  else fail "round trip $name" "$(cat "$TMP/err")"; fi
done
got=$("$CINFER" tokenize --model $Q --file "$TMP/mixed.txt" | cut -d' ' -f1)
[ "$got" = "151644" ] && pass "special token in text" || fail "special token in text" "first id '$got', want 151644 (<|im_start|>)"
got=$("$CINFER" detokenize --model $Q --ids 151644,872,151645 --skip-special)
[ "$got" = "user" ] && pass "detokenize --skip-special" || fail "detokenize --skip-special" "got '$got'"
: >"$TMP/empty.txt"
got=$("$CINFER" tokenize --model $Q --file "$TMP/empty.txt")
[ -z "$got" ] && pass "tokenize empty file" || fail "tokenize empty file" "got '$got'"

# Bad input: one "cinfer: " line, exit 1; usage errors exit 2.
printf 'abc\xff\xfe' >"$TMP/bad.txt"
expect_code "invalid UTF-8" 1 "not valid UTF-8" "$CINFER" tokenize --model $Q --file "$TMP/bad.txt"
expect_code "missing input file" 1 "cannot open" "$CINFER" tokenize --model $Q --file "$TMP/nope.txt"
expect_code "missing model dir" 1 "tokenizer.json" "$CINFER" tokenize --model "$TMP/nomodel" --file "$TMP/hello.txt"
expect_code "id out of range" 1 "not in the vocabulary" "$CINFER" detokenize --model $Q --ids 1,99999999
expect_code "negative id" 1 "not in the vocabulary" "$CINFER" detokenize --model $L --ids -5
expect_code "bad id list" 2 "bad entry" "$CINFER" detokenize --model $Q --ids 1,x,3
expect_code "trailing comma" 2 "bad entry" "$CINFER" detokenize --model $Q --ids 1,2,
expect_code "tokenize needs --file" 2 "--file is required" "$CINFER" tokenize --model $Q
expect_code "detokenize needs --ids" 2 "--ids is required" "$CINFER" detokenize --model $Q
expect_code "unknown option" 2 "unknown option" "$CINFER" tokenize --model $Q --file "$TMP/hello.txt" --bogus
expect_code "option without value" 2 "needs a value" "$CINFER" tokenize --model $Q --file
echo '{"model": {"type": "WordPiece", "vocab": {}}}' >"$TMP/tokenizer.json"
expect_code "unsupported model" 1 "model.type 'WordPiece'" "$CINFER" tokenize --model "$TMP" --file "$TMP/hello.txt"
