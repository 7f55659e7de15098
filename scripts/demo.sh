#!/usr/bin/env bash
# `make demo`: text from the embedded demo model (models/demo: a 4.6 M-parameter
# deepseek_v3-architecture toy trained on fortunes and WordNet glosses; see README), with
# a fixed seed, and the speed it ran at.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${CINFER_DEMO_MODEL:-models/demo}
build/cinfer inspect --model "$model" | sed -n '1,6p'
for prompt in "The meaning of life is" "A friend in need" "computer: "; do
  echo
  echo "== prompt: \"$prompt\" (temperature 0.8, top-p 0.95, seed 42)"
  printf '%s' "$prompt"
  build/cinfer generate --model "$model" --prompt "$prompt" --max-tokens 64 --temperature 0.8 --top-p 0.95 \
    --seed 42 --stats 2>&1
done
echo
build/cinfer bench --model "$model" --prompt-len 128 --gen 64 | sed -n '2,3p'
