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

# start_server NAME ARGS...: `cinfer serve --port 0 ARGS...` in the background, its stderr in
# $TMP/NAME.err; sets PORT and PID (and adds PID to the caller's PIDS array, which its
# cleanup kills). One PASS line when the server prints its address, else one FAIL and
# status 1.
start_server() {
  local name=$1; shift
  "$CINFER" serve --port 0 "$@" 2>"$TMP/$name.err" & PID=$!
  PIDS+=("$PID")
  PORT=
  for _ in $(seq 1 150); do
    PORT=$(grep -o 'http://127.0.0.1:[0-9]*' "$TMP/$name.err" 2>/dev/null | head -1 | cut -d: -f3)
    [ -n "$PORT" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$PORT" ]; then fail "server $name starts" "$(head -c 400 "$TMP/$name.err")"; return 1; fi
  pass "server $name starts (port $PORT)"
}

# stop_server NAME PID: SIGTERM, exit 0 within 20 s, no sanitizer report on stderr.
stop_server() {
  local name=$1 pid=$2 rc
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "server $name stops on SIGTERM" "still running"; kill -9 "$pid"; return; fi
  wait "$pid"; rc=$?
  if [ $rc -ne 0 ]; then fail "server $name stops on SIGTERM" "exit $rc: $(tail -c 600 "$TMP/$name.err")"
  elif grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$TMP/$name.err"; then
    fail "server $name stops on SIGTERM" "sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error' "$TMP/$name.err")"
  else pass "server $name stops cleanly on SIGTERM"; fi
}
