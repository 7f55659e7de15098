#!/usr/bin/env bash
# gguf_parity.sh — do cinfer and llama.cpp compute the same function on the GGUFs that
# bench/make_bf16_gguf.py writes? For each hybrid family of issue #17 (Qwen3.5-MoE, LFM2-MoE,
# Nemotron-H MoE) and DeepSeek-V2-Lite dims (+ q_lora_rank 1024, as llama.cpp's deepseek2 loader
# wants below 26 layers; issue #15): `cinfer make-random` from the bench config with fewer experts (and a 4096
# vocabulary) and the first LAYERS of its real layer pattern, written as a GGUF with every matrix
# widened to F32 (--f32: the same producers as the bf16 file, so the transforms are what is
# checked), then the logits of 24 random ids from `cinfer logits` and from bench/llamacpp_logits.c
# (llama.cpp's CPU build: f32 KV cache, no flash attention, so nothing on its side rounds to
# 16 bits), compared row by row. Prints max|diff| and argmax agreement per family.
# Env: LCPP (a llama.cpp checkout with a CPU build in $LCPP/build), CINFER (default build/cinfer),
#      PY (a python3 with numpy; default python3), OUT (default /tmp/gguf-parity), THREADS (2),
#      SPECS (default: all four) "config-name:layers:key=value[,key=value...]" each, the config's keys
#      overridden.
set -euo pipefail
cd "$(dirname "$0")/.."
LCPP=${LCPP:-/tmp/llama.cpp} CINFER=${CINFER:-build/cinfer} PY=${PY:-python3}
OUT=${OUT:-/tmp/gguf-parity} THREADS=${THREADS:-2}
mkdir -p "$OUT"
cc -O2 -std=c11 -Wall -I"$LCPP/include" -I"$LCPP/ggml/include" bench/llamacpp_logits.c \
   -L"$LCPP/build/bin" -lllama -Wl,-rpath,"$LCPP/build/bin" -o "$OUT/llamacpp_logits"
ids=$($PY -c "import random; random.seed(3); print(','.join(str(random.randrange(3, 4096)) for _ in range(24)))")
SPECS=${SPECS:-"qwen3.5-35b-a3b:4:num_experts=16 nemotron-3-nano-30b-a3b:6:n_routed_experts=16 lfm2-8b-a1b:4:num_experts=8
  deepseek-v2-lite-dims:4:n_routed_experts=16,q_lora_rank=1024"}
for spec in $SPECS; do
  IFS=: read -r name layers experts <<<"$spec"
  d=$OUT/$name-${layers}l
  $PY - "bench/$name.config.json" "$OUT/$name.json" "$experts" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
for kv in sys.argv[3].split(","):
    k, v = kv.split("=")
    c[k] = int(v)
c["vocab_size"] = 4096
c["bos_token_id"], c["eos_token_id"] = 1, 2
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
  [ -d "$d" ] || $CINFER make-random --config "$OUT/$name.json" --out "$d" --layers "$layers" --seed 1
  $PY bench/make_bf16_gguf.py "$d" "$d-f32.gguf" "$LCPP" --f32 >/dev/null
  "$OUT/llamacpp_logits" "$d-f32.gguf" "$ids" "$OUT/$name.llamacpp.f32" "$THREADS" >/dev/null
  $CINFER logits --model "$d" --tokens "$ids" --out "$OUT/$name.cinfer.f32" --threads "$THREADS" >/dev/null
  $PY - "$OUT/$name.llamacpp.f32" "$OUT/$name.cinfer.f32" "$name ($layers layers)" <<'PYEOF'
import sys
import numpy as np
a = np.fromfile(sys.argv[1], np.float32).reshape(24, -1)
b = np.fromfile(sys.argv[2], np.float32).reshape(24, -1)
d = np.abs(a - b).max()
print(f"PARITY {sys.argv[3]}: max|logit diff| {d:.2e} (logits up to {np.abs(b).max():.1f}), "
      f"argmax {(a.argmax(1) == b.argmax(1)).sum()}/24")
PYEOF
done
