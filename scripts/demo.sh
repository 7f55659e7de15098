#!/usr/bin/env bash
# `make demo`: generate from the default model. Until the embedded trained model exists
# (models/demo/), this runs the Qwen3 parity fixture (tiny, random weights): the output is
# token ids, not text, and shows the engine end to end with a fixed seed.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${CINFER_DEMO_MODEL:-tests/fixtures/qwen3_tied}
echo "== cinfer inspect --model $model"
build/cinfer inspect --model "$model"
echo "== cinfer generate (greedy) from prompt ids 11,12,13,14"
build/cinfer generate --model "$model" --prompt-ids 11,12,13,14 --max-tokens 24 --ids
echo "== cinfer generate (temperature 0.8, top-p 0.9, seed 42)"
build/cinfer generate --model "$model" --prompt-ids 11,12,13,14 --max-tokens 24 --temperature 0.8 --top-p 0.9 --seed 42 --ids
echo "== cinfer bench"
build/cinfer bench --model "$model" --prompt-len 64 --gen 64
