#!/usr/bin/env bash
# cinfer vs transformers on the CPU, same checkpoint, same threads, alternately in one run
# (bench/RESULTS.md). Needs python3 with torch and transformers (the GPU box has them; its
# CPU is the one measured). First a parity check: the logits of a 16-token prompt from both
# (transformers in float32 on the same bf16 weights), then ROUNDS alternating rounds of
# `cinfer bench` and bench/transformers_cpu.py in float32 and bfloat16.
#   MODEL=DIR [CINFER=build/cinfer] [THREADS=16] [ROUNDS=2] [PROMPT=128] [GEN=32] \
#     bash bench/run_transformers_compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MODEL:?MODEL=checkpoint folder}" "${CINFER:=build/cinfer}" "${THREADS:=16}" "${ROUNDS:=2}" "${PROMPT:=128}" "${GEN:=32}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
toks=$(python3 -c 'import random; random.seed(3); print(",".join(str(random.randrange(1000, 30000)) for _ in range(16)))')
"$CINFER" logits --model "$MODEL" --tokens "$toks" --out "$tmp/c.f32" --threads "$THREADS"
python3 bench/transformers_cpu.py "$MODEL" --threads "$THREADS" --logits-of "$toks" --out "$tmp/t.f32"
python3 - "$tmp/c.f32" "$tmp/t.f32" <<'PY'
import sys, numpy as np
c, t = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
V = c.size // 16; c, t = c.reshape(16, V), t.reshape(16, V)
print(f"parity: 16 positions x {V}: max|diff| {np.abs(c - t).max():.3g} (logit scale {np.abs(t).max():.3g}), "
      f"argmax equal at {(c.argmax(1) == t.argmax(1)).sum()}/16")
PY
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r"
  "$CINFER" bench --model "$MODEL" --prompt-len "$PROMPT" --gen "$GEN" --threads "$THREADS" | grep -E "^(prefill|decode )"
  python3 bench/transformers_cpu.py "$MODEL" --threads "$THREADS" --prompt-len "$PROMPT" --gen "$GEN" --dtype float32
  python3 bench/transformers_cpu.py "$MODEL" --threads "$THREADS" --prompt-len "$PROMPT" --gen "$GEN" --dtype bfloat16
done
