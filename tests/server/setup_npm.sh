#!/usr/bin/env bash
# Installs the official `openai` npm client (pinned) into .cache/npm for the server tests
# (tests/cli/server.sh runs it first). Idempotent: nothing happens when that version is
# already there. .cache is git-ignored. Needs node + npm (scripts/deps.sh installs npm).
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=4.95.0
pkg=.cache/npm/node_modules/openai/package.json
if [ -f "$pkg" ] && grep -q "\"version\": \"$ver\"" "$pkg"; then exit 0; fi
mkdir -p .cache/npm
npm install --prefix .cache/npm --no-audit --no-fund --silent "openai@$ver" >/dev/null
echo "setup_npm: openai@$ver"
