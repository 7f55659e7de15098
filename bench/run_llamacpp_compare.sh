#!/usr/bin/env bash
# Decode (and prefill) of cinfer on a 4-bit mlx checkpoint against llama.cpp's CPU build on a
# Q4_0 GGUF of the same random weights (bench/RESULTS.md, "cinfer vs llama.cpp").
#   SRC     a bf16 qwen3_moe checkpoint from `cinfer make-random` (bench/run_cpu.sh makes
#           /tmp/cinfer-bench/qwen3-30b-a3b); its first LAYERS layers are used
#   LCPP    a llama.cpp checkout built beside the project (never committed):
#             cmake -S $LCPP -B $LCPP/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
#                   -DGGML_NATIVE=ON -DGGML_CPU_AARCH64=OFF && cmake --build $LCPP/build --target llama-bench
#           (GGML_CPU_AARCH64=OFF: the snapshot used here aborts in its Q4_0 repack path for
#           MoE, GGML_ASSERT(params->wsize >= ...) in ggml-cpu-aarch64.cpp mul_mat_id)
# Runs the two engines alternately ROUNDS times with the same thread count.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${SRC:-/tmp/cinfer-bench/qwen3-30b-a3b} LAYERS=${LAYERS:-4} OUT=${OUT:-/tmp/q4pair}
LCPP=${LCPP:-/tmp/llama.cpp} THREADS=${THREADS:-2} ROUNDS=${ROUNDS:-3}
[ -f "$OUT/q4_0.gguf" ] || python3 bench/make_q4_pair.py "$SRC" "$LAYERS" "$OUT" "$LCPP"
for r in $(seq "$ROUNDS"); do
  echo "== round $r cinfer (loadavg $(cut -d' ' -f1 /proc/loadavg))"
  build/cinfer bench --model "$OUT/mlx4" --prompt-len 128 --gen 64 --threads "$THREADS" | grep -E "prefill|decode|weights"
  echo "== round $r llama.cpp (loadavg $(cut -d' ' -f1 /proc/loadavg))"
  "$LCPP/build/bin/llama-bench" -m "$OUT/q4_0.gguf" -p 128 -n 64 -t "$THREADS" -r 2 2>/dev/null | grep -E "pp128|tg64"
done
