#!/usr/bin/env bash
# Installs the npm packages the server tests use (pinned) into .cache/npm: the official
# `openai` client (tests/server/openai_client.js, responses_client.js; 6.x is the newest
# line that runs on Debian 12's Node 20, 7.x wants Node 22), `playwright-core` (drives
# the Debian chromium for the chat page test, tests/server/chat_page.js; it downloads no
# browser) and the `ajv` JSON Schema validator with `ajv-formats` (tests/cli/schema.sh checks
# every structured output with it). tests/cli/server.sh, chat_page.sh and schema.sh run this
# first. Idempotent: nothing happens when those versions are already there. .cache is
# git-ignored. Needs node + npm (scripts/deps.sh installs npm).
set -euo pipefail
cd "$(dirname "$0")/../.."
want=(openai@6.30.1 playwright-core@1.65.1 ajv@8.17.1 ajv-formats@3.0.1)
missing=()
for p in "${want[@]}"; do
  name=${p%@*} ver=${p##*@}
  pkg=.cache/npm/node_modules/$name/package.json
  [ -f "$pkg" ] && grep -q "\"version\": \"$ver\"" "$pkg" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
mkdir -p .cache/npm
npm install --prefix .cache/npm --no-audit --no-fund --silent "${want[@]}" >/dev/null
echo "setup_npm: ${missing[*]}"
