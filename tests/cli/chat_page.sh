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
