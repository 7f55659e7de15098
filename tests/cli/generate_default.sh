# `cinfer generate` without --model runs the embedded demo model (models/demo), as serve and
# chat do: the same bytes as --model models/demo, for text and for --ids; and a binary with
# no demo model near it says so in one line.
. "$(dirname "$0")/lib.sh"
for mode in "" "--ids"; do
  # shellcheck disable=SC2086
  "$CINFER" generate --prompt "Once upon a time" --max-tokens 16 $mode >"$TMP/def" 2>"$TMP/err"; rc=$?
  # shellcheck disable=SC2086
  "$CINFER" generate --model models/demo --prompt "Once upon a time" --max-tokens 16 $mode >"$TMP/demo" 2>>"$TMP/err"
  if [ $rc -eq 0 ] && [ "$(wc -c <"$TMP/def")" -gt 2 ] && cmp -s "$TMP/def" "$TMP/demo"; then
    pass "generate without --model = --model models/demo ${mode:-(text)}"
  else fail "generate without --model ${mode:-(text)}" "rc $rc: '$(head -c 200 "$TMP/def")' vs '$(head -c 200 "$TMP/demo")' $(head -c 300 "$TMP/err")"; fi
done
# still needs a prompt
expect_usage "generate without --model or prompt" "give exactly one of --prompt-ids, --prompt or --chat" "$CINFER" generate
# a copy of the binary far from any models/demo (static binary; a sanitizer build finds its
# runtime libraries by their absolute paths)
mkdir -p "$TMP/a/b/bin" && cp "$CINFER" "$TMP/a/b/bin/cinfer"
expect_err "generate without --model, no demo model near the binary" "no --model given and the demo model (models/demo) is not found" \
  "$TMP/a/b/bin/cinfer" generate --prompt "hi" --max-tokens 2
