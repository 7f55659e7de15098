#!/usr/bin/env bash
# CPU side-by-side of cinfer and llama.cpp on the same random bf16 dense weights
# (Qwen3-0.6B dims; bench/RESULTS.md, issue #15): prefill 128, decode 64, 1 and 2 threads,
# the two engines alternating, ROUNDS rounds, loadavg printed before every run.
#   SRC     a bf16 qwen3 checkpoint from
#             build-cpu/cinfer make-random --config bench/qwen3-0.6b.config.json --out /tmp/q06 --dtype bf16 --seed 1
#   GGUF    the same weights for llama.cpp (bench/make_bf16_gguf.py writes it if missing)
#           (the 4-bit pair instead: `python3 bench/make_q4_pair.py /tmp/q06 28 /tmp/q06-q4 $LCPP`, then
#           SRC=/tmp/q06-q4/mlx4 GGUF=/tmp/q06-q4/q4_0.gguf)
#   LCPP    a llama.cpp checkout built beside the project (never committed):
#             cmake -S $LCPP -B $LCPP/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
#             cmake --build $LCPP/build -j2 --target llama-bench
#   LCPP_BIN  the directory of llama-bench (default $LCPP/build/bin). On an Intel CPU with AMX,
#           llama.cpp d32676d77 built with GGML_NATIVE runs Q4_0 through its AMX kernels, which died
#           with SIGILL (tilezero, no tile configuration) on the 2-core Sapphire Rapids VM of
#           2026-12-05; a build with its AMX off served there:
#             cmake -S $LCPP -B $LCPP/build-noamx ... -DGGML_NATIVE=ON \
#               "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" (and the same CMAKE_CXX_FLAGS)
#   CINFER  the cinfer binary (CPU build: cmake -S . -B build-cpu -DCINFER_CUDA=OFF -DCMAKE_BUILD_TYPE=Release)
#   PY      a python3 with numpy (for the GGUF writer only)
#   BEFORE  optional: a second cinfer binary (e.g. an older build) run in each round too, before CINFER
#   ALT     optional: flags for a second run of CINFER in each round (e.g. --bf16-act), after the first
#   PROMPT  the prompt length (default 128): cinfer's --prompt-len, llama-bench's -p and its second depth
# llama-bench runs -d "0,PROMPT": its tg test starts from an empty cache unless given a depth,
# while cinfer bench decodes after its prompt (context PROMPT .. PROMPT + GEN), so "tgN @ dPROMPT"
# is the like-for-like decode and "ppPROMPT" (depth 0) the like-for-like prefill; the other two
# rows are printed for comparison with the tables before 2026-12-06, which had depth 0 only
# (on the Zen 5 that day, Qwen3-0.6B-dims Q4_0 one thread: tg64 65.9, tg64 @ d128 55.6 tok/s).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${SRC:-/tmp/q06} GGUF=${GGUF:-/tmp/q06.gguf} LCPP=${LCPP:-/tmp/llama.cpp}
CINFER=${CINFER:-build-cpu/cinfer} BEFORE=${BEFORE:-} ALT=${ALT:-} ROUNDS=${ROUNDS:-2} PROMPT=${PROMPT:-128} THREADS=${THREADS:-"1 2"} PY=${PY:-python3}
[ -f "$GGUF" ] || "$PY" bench/make_bf16_gguf.py "$SRC" "$GGUF" "$LCPP"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cpus)"
echo "llama.cpp: $(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo '?')"
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    if [ -n "$BEFORE" ]; then
      echo "== round $r threads $t cinfer BEFORE (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
      "$BEFORE" bench --model "$SRC" --prompt-len "$PROMPT" --gen 64 --threads "$t" 2>&1 | grep -Ei "prefill|decode|weights|machine|bandwidth"
    fi
    echo "== round $r threads $t cinfer (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
    "$CINFER" bench --model "$SRC" --prompt-len "$PROMPT" --gen 64 --threads "$t" 2>&1 | grep -Ei "prefill|decode|weights|machine|bandwidth"
    if [ -n "$ALT" ]; then
      echo "== round $r threads $t cinfer $ALT (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
      "$CINFER" bench --model "$SRC" --prompt-len "$PROMPT" --gen 64 --threads "$t" $ALT 2>&1 | grep -Ei "prefill|decode|weights|machine|bandwidth"
    fi
    echo "== round $r threads $t llama.cpp (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
    "${LCPP_BIN:-$LCPP/build/bin}/llama-bench" -m "$GGUF" -p "$PROMPT" -n 64 -d "0,$PROMPT" -t "$t" -r 2 2>/dev/null | grep -E "pp$PROMPT|tg64"
  done
done
