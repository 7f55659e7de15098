# `cinfer chat` on the embedded demo model (no --model), greedy: the first turn's reply is
# `generate --chat`'s; the second turn takes the first from the cache (--stats); /reset
# starts over (the first message again gives the first reply); bad flags, a missing model
# and a conversation past --ctx are one line on stderr. Prints PASS/FAIL lines.
. "$(dirname "$0")/lib.sh"
want=$($CINFER generate --model models/demo --chat "Tell me about dogs" --max-tokens 12 2>"$TMP/err")
printf 'Tell me about dogs\nAnd cats?\n/reset\nTell me about dogs\n' | $CINFER chat --max-tokens 12 --stats >"$TMP/chat" 2>"$TMP/stats"
rc=$?
if [ $rc -ne 0 ]; then fail "chat runs" "exit $rc: $(head -c 300 "$TMP/stats")"; exit 0; fi
# replies may span lines: count the lines of the single-turn reference
n=$(printf '%s\n' "$want" | wc -l)
first=$(head -n "$n" "$TMP/chat")
[ -n "$want" ] && [ "$first" = "$want" ] && pass "chat: turn 1 is generate --chat's reply" || fail "chat: turn 1" "'$first' vs '$want'"
last=$(tail -n "$n" "$TMP/chat")
[ "$last" = "$want" ] && pass "chat: /reset starts over" || fail "chat: /reset" "'$last' vs '$want'"
c2=$(sed -n 2p "$TMP/stats" | grep -o '([0-9]* from the cache)' | grep -o '[0-9]*')
c1=$(sed -n 1p "$TMP/stats" | grep -o '([0-9]* from the cache)' | grep -o '[0-9]*')
c3=$(sed -n 3p "$TMP/stats" | grep -o '([0-9]* from the cache)' | grep -o '[0-9]*')
[ "$c1" = 0 ] && [ -n "$c2" ] && [ "$c2" -gt 10 ] && pass "chat: turn 2 re-uses turn 1's cache ($c2 tokens)" || fail "chat: cache reuse" "$(cat "$TMP/stats")"
[ -n "$c3" ] && [ "$c3" -gt 0 ] && pass "chat: after /reset the same prompt comes from the cache" || fail "chat: reuse after /reset" "$(cat "$TMP/stats")"
expect_err "chat: unknown option" "--nope" $CINFER chat --nope
expect_err "chat: bad --temperature" "--temperature" $CINFER chat --temperature hot
expect_err "chat: missing model" "/nonexistent" $CINFER chat --model /nonexistent
printf '%s\n' "$(head -c 600 /dev/zero | tr '\0' 'x')" >"$TMP/long"
expect_err "chat: a conversation past --ctx" "--ctx" sh -c "$CINFER chat --ctx 32 <'$TMP/long'"
