# Shared helpers for tests/cli/*.sh (sourced). Each check prints PASS or FAIL lines.
: "${CINFER:=build/cinfer}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# expect_err NAME SUBSTRING CMD...: CMD must exit with status 1..125 and print exactly one
# line on stderr containing SUBSTRING (a crash or a signal is a failure).
expect_err() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  local lines; lines=$(wc -l <"$TMP/err")
  if [ $rc -lt 1 ] || [ $rc -gt 125 ]; then fail "$name" "exit status $rc; stderr: $(head -c 300 "$TMP/err")"
  elif [ "$lines" -ne 1 ]; then fail "$name" "expected one stderr line, got $lines: $(head -c 300 "$TMP/err")"
  elif ! grep -qF -- "$want" "$TMP/err"; then fail "$name" "stderr lacks '$want': $(cat "$TMP/err")"
  else pass "$name"; fi
}

# expect_usage NAME SUBSTRING CMD...: exit status exactly 2, one stderr line with SUBSTRING.
expect_usage() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err" </dev/null; local rc=$?
  local lines; lines=$(wc -l <"$TMP/err")
  if [ $rc -ne 2 ]; then fail "$name" "exit status $rc (want 2); stderr: $(head -c 300 "$TMP/err")"
  elif [ "$lines" -ne 1 ]; then fail "$name" "expected one stderr line, got $lines: $(head -c 300 "$TMP/err")"
  elif ! grep -qF -- "$want" "$TMP/err"; then fail "$name" "stderr lacks '$want': $(cat "$TMP/err")"
  else pass "$name"; fi
}

# expect_ok NAME CMD...: CMD exits 0.
expect_ok() {
  local name=$1; shift
  if "$@" >"$TMP/out" 2>"$TMP/err"; then pass "$name"; else fail "$name" "exit $?: $(head -c 300 "$TMP/err")"; fi
}

# json_ids FILE KEY: the integer list under KEY in a ref.json, comma-separated.
json_ids() { tr -d ' \n' <"$1" | grep -o "\"$2\":\[[0-9,]*\]" | sed 's/.*\[\(.*\)\]/\1/'; }
