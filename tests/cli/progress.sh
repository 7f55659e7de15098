# The checkpoint-loading progress line (apps/cmd_progress.h): nothing at all on stderr when
# stderr is not a terminal; with CINFER_PROGRESS=1 (or a terminal) one line redrawn with \r
# per shard ("cinfer: reading shard i/N FILE a/b MiB (total c/d MiB)") ended once by
# "cinfer: read N shards, X MiB in T s" and a newline, stdout untouched.
. "$(dirname "$0")/lib.sh"
sh=tests/fixtures/qwen3_untied_sharded   # 10 shards
run_logits() { "$CINFER" logits --model $sh --tokens 1,2,3 --out "$1"; }

# not a terminal (stderr is a file here): quiet, for every command that opens a model
unset CINFER_PROGRESS
run_logits "$TMP/quiet.f32" 2>"$TMP/err"
[ $? -eq 0 ] && [ ! -s "$TMP/err" ] && pass "progress: logits, stderr not a tty: nothing printed" \
  || fail "progress: logits quiet" "$(od -c "$TMP/err" | head -5)"
"$CINFER" generate --model models/demo --prompt "Once upon a time" --max-tokens 8 >"$TMP/gen_quiet.txt" 2>"$TMP/err"
[ $? -eq 0 ] && [ ! -s "$TMP/err" ] && pass "progress: generate, stderr not a tty: nothing printed" \
  || fail "progress: generate quiet" "$(od -c "$TMP/err" | head -5)"
CINFER_PROGRESS=0 run_logits "$TMP/off.f32" 2>"$TMP/err"
[ ! -s "$TMP/err" ] && pass "progress: CINFER_PROGRESS=0: nothing printed" || fail "progress: off" "$(head -c 200 "$TMP/err")"

# forced on: the line's format
CINFER_PROGRESS=1 run_logits "$TMP/loud.f32" 2>"$TMP/err"; rc=$?
nl=$(tr -cd '\n' <"$TMP/err" | wc -c); cr=$(tr -cd '\r' <"$TMP/err" | wc -c)
last=$(tr '\r' '\n' <"$TMP/err" | grep -a . | tail -1)
if [ $rc -ne 0 ]; then fail "progress: forced" "exit $rc: $(head -c 300 "$TMP/err")"
elif [ "$nl" -ne 1 ] || [ "$cr" -lt 10 ]; then fail "progress: forced" "want one line redrawn per shard (>= 10 \\r, 1 \\n), got $cr \\r and $nl \\n"
else pass "progress: forced: one line on stderr, redrawn $cr times"; fi
for i in 1 5 9; do   # the last shard's end is the closing line
  f=$(printf 'model-%05d-of-00010.safetensors' $i)
  tr '\r' '\n' <"$TMP/err" | grep -aqE "^cinfer: reading shard $i/10 $f [0-9]+\.[0-9]{2}/[0-9]+\.[0-9]{2} MiB \(total [0-9]+\.[0-9]{2}/0\.54 MiB\)" \
    && pass "progress: shard $i/10 is shown with its bytes and the total" \
    || fail "progress: shard $i" "$(tr '\r' '\n' <"$TMP/err" | grep -a "shard $i/" | od -c | head -3)"
done
echo "$last" | grep -aqE '^cinfer: read 10 shards, 0\.54 MiB in [0-9]+\.[0-9] s' && pass "progress: ends with '$(echo "$last" | tr -d '\033' | sed 's/\[K$//')'" \
  || fail "progress: last line" "$(echo "$last" | od -c | head -3)"
cmp -s "$TMP/quiet.f32" "$TMP/loud.f32" && pass "progress: the read-ahead changes no logit" || fail "progress: logits" "differ with the read-ahead"
CINFER_PROGRESS=1 "$CINFER" generate --model models/demo --prompt "Once upon a time" --max-tokens 8 >"$TMP/gen_loud.txt" 2>"$TMP/err"
cmp -s "$TMP/gen_quiet.txt" "$TMP/gen_loud.txt" && grep -aq "read 1 shard, " "$TMP/err" \
  && pass "progress: generate: stdout unchanged, 'read 1 shard' on stderr" || fail "progress: generate forced" "$(head -c 300 "$TMP/err")"
# inspect reads no weights: no line even when forced
CINFER_PROGRESS=1 "$CINFER" inspect --model $sh >/dev/null 2>"$TMP/err"
[ ! -s "$TMP/err" ] && pass "progress: inspect reads no weights, prints no line" || fail "progress: inspect" "$(head -c 200 "$TMP/err")"

# a real terminal, through script(1) (util-linux): stderr is the pty, stdout a file
if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
  script -qec "$CINFER logits --model $sh --tokens 1,2,3 --out $TMP/tty.f32" /dev/null >"$TMP/tty" 2>&1 </dev/null
  grep -aq "read 10 shards" "$TMP/tty" && pass "progress: on a terminal the line is shown" || fail "progress: tty" "$(head -c 300 "$TMP/tty")"
  CINFER_PROGRESS=0 script -qec "$CINFER logits --model $sh --tokens 1,2,3 --out $TMP/tty0.f32" /dev/null >"$TMP/tty" 2>&1 </dev/null
  ! grep -aq "shard" "$TMP/tty" && pass "progress: on a terminal, CINFER_PROGRESS=0 keeps it quiet" || fail "progress: tty off" "$(head -c 300 "$TMP/tty")"
else
  echo "SKIP progress: no working script(1) / pseudo-terminal here for the terminal case"
fi
