# The embedded demo model (models/demo) against its transformers reference (tests/demo/
# ref.json, made by tools/demo/train.py on the GPU box): held-out perplexity within 0.5%,
# and greedy continuations of three prompts, token for token.
. "$(dirname "$0")/lib.sh"
m=models/demo
ref=tests/demo/ref.json
want=$(tr -d ' \n' <$ref | grep -o '"perplexity":[0-9.]*' | cut -d: -f2)
got=$($CINFER perplexity --model $m --file tests/demo/heldout.txt --window 256 2>"$TMP/err" | awk '{print $2}')
if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
  pass "demo perplexity $got vs transformers $want"
else fail "demo perplexity" "got '$got' want '$want' $(cat "$TMP/err")"; fi
# greedy: each prompt's ids as transformers generated them
flat=$(tr -d '\n' <$ref)
for i in 0 1 2; do
  prompt=$(echo "$flat" | grep -o '"prompt": *"[^"]*"' | sed -n "$((i + 1))p" | sed 's/.*: *"\(.*\)"/\1/')
  ids=$(echo "$flat" | grep -o '"ids": *\[[0-9, ]*\]' | sed -n "$((i + 1))p" | sed 's/.*\[\(.*\)\]/\1/' | tr -d ' ')
  out=$($CINFER generate --model $m --prompt "$prompt" --max-tokens 32 --ids 2>"$TMP/err")
  if [ -n "$ids" ] && [ "$out" = "$ids" ]; then pass "demo greedy '$prompt'"; else fail "demo greedy '$prompt'" "got '$out' want '$ids' $(cat "$TMP/err")"; fi
done
