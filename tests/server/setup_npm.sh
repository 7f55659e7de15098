#!/usr/bin/env bash
# Installs the npm packages the server tests use (pinned) into .cache/npm: the official
# `openai` client (tests/cli/server.sh runs it first) and the `ajv` JSON Schema validator
# with `ajv-formats` (tests/cli/schema.sh checks every structured output with it).
# Idempotent: nothing happens when those versions are already there. .cache is git-ignored.
# Needs node + npm (scripts/deps.sh installs npm).
set -euo pipefail
cd "$(dirname "$0")/../.."
pkgs=(openai@4.95.0 ajv@8.17.1 ajv-formats@3.0.1)
missing=()
for p in "${pkgs[@]}"; do
  name=${p%@*} ver=${p##*@}
  f=.cache/npm/node_modules/$name/package.json
  if [ -f "$f" ] && grep -q "\"version\": \"$ver\"" "$f"; then continue; fi
  missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
mkdir -p .cache/npm
npm install --prefix .cache/npm --no-audit --no-fund --silent "${pkgs[@]}" >/dev/null
echo "setup_npm: ${missing[*]}"
