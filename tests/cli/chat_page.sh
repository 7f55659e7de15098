# The chat page of `cinfer serve` (GET /) in a real browser: Debian's headless Chromium
# (chromium-headless-shell, from scripts/deps.sh) driven by playwright-core
# (tests/server/chat_page.js) against two servers on loopback with the demo model: P (no
# key) and Q (an API key, and a template that opens <think> so that replies are reasoning).
# Typing, streaming, Stop (the server's sequence is cancelled), New chat, errors, the key,
# folded reasoning. When the browser is missing and cannot be installed (not root, no
# network), the test prints one SKIP line with the reason; anything else that keeps it from
# running is a FAIL. Bounded: < 90 s.
. "$(dirname "$0")/lib.sh"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
KEY=sk-page-test

chrome=$(command -v chromium-headless-shell || command -v chromium || true)
if [ -z "$chrome" ]; then
  if [ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell >"$TMP/apt.log" 2>&1; then
    chrome=$(command -v chromium-headless-shell || true)
  fi
  if [ -z "$chrome" ]; then
    why=$( [ "$(id -u)" = 0 ] && tail -1 "$TMP/apt.log" || echo "not root: run scripts/deps.sh as root" )
    echo "SKIP chat page in a browser: chromium-headless-shell is not installed and cannot be installed here ($why)"
    exit 0
  fi
fi
if ! bash tests/server/setup_npm.sh >"$TMP/npm.log" 2>&1 || [ ! -f .cache/npm/node_modules/playwright-core/package.json ]; then
  fail "playwright-core installed" "$(tail -3 "$TMP/npm.log")"; exit 1
fi

# start_server NAME ARGS...: sets PORT and PID
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
}
stop_server() {
  local name=$1 pid=$2 rc
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "server $name stops on SIGTERM" "still running"; kill -9 "$pid"; return; fi
  wait "$pid"; rc=$?
  if [ $rc -ne 0 ] || grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$TMP/$name.err"; then
    fail "server $name stops cleanly" "exit $rc: $(tail -c 600 "$TMP/$name.err")"
  else pass "server $name stops cleanly"; fi
}

printf '%s' "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>
{{ m['content'] }}<|end|>
{% endfor %}{% if add_generation_prompt %}<|assistant|>
<think>
{% endif %}" >"$TMP/think.jinja"
start_server P --parallel 2 --ctx 8192 || exit 1
PP=$PID; PORTP=$PORT
start_server Q --parallel 2 --api-key "$KEY" --chat-template "$TMP/think.jinja" || exit 1
PQ=$PID; PORTQ=$PORT
timeout 80 node tests/server/chat_page.js "$chrome" "http://127.0.0.1:$PORTP" "http://127.0.0.1:$PORTQ" "$KEY" >"$TMP/page.out" 2>&1
grep -E '^(PASS|FAIL) ' "$TMP/page.out" | sed 's/^PASS /PASS chat page: /; s/^FAIL /FAIL chat page: /'
[ "$(grep -cE '^(PASS|FAIL) ' "$TMP/page.out")" -ge 9 ] || fail "chat page: every check ran" "$(tail -c 600 "$TMP/page.out" | tr '\n' ' ')"
stop_server P "$PP"
stop_server Q "$PQ"
