#!/usr/bin/env bash
# CPU side-by-side of cinfer and llama.cpp on the same random Qwen3-30B-A3B-dims MoE weights cut
# to a few layers (bench/RESULTS.md, issue #15; CONFIG picks another MoE config, e.g. DeepSeek-V2-Lite
# dims: CONFIG=/tmp/ds.json with q_lora_rank 1024, which llama.cpp's deepseek2 loader wants below 26
# layers, SRC=/tmp/cpu2/ds4 WHICH=bf16; bench/gguf_parity.sh checks that GGUF writer against cinfer): bf16 against the GGUF bf16 twin, and MLX
# affine 4-bit (g64) against Q4_0 of the same weights; prefill 128 and decode 32, 1 and 2
# threads, the engines alternating, ROUNDS rounds, loadavg printed before every run.
#   SRC     a bf16 qwen3_moe checkpoint, made here if missing:
#             build-cpu/cinfer make-random --config $CONFIG --out $SRC \
#               --dtype bf16 --seed 1 --layers $LAYERS            (4 layers: 3.11 B params, 6.2 GB)
#   GGUF    its bf16 twin for llama.cpp (bench/make_bf16_gguf.py writes it if missing)
#   Q4      a directory with mlx4/ (cinfer) and q4_0.gguf (llama.cpp) of the same weights
#             (bench/make_q4_pair.py writes them if missing; ~1.6 GiB each at 4 layers)
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
#   BEFORE  optional: a second cinfer binary (e.g. an older build) run in each round too, before CINFER
#   ALT     optional: flags for a second run of CINFER in each round (e.g. --bf16-act), after the first
#           (and of BEFORE, when both are given)
#   PY      a python3 with numpy (the GGUF writers only)
#   WHICH   "bf16 q4" (default), or one of them
#   GEN PROMPT THREADS ROUNDS  decode tokens (32), prompt tokens (128), "1 2", 2
# llama-bench runs -d "0,PROMPT": its tg test starts from an empty cache unless given a depth,
# while cinfer bench decodes after its prompt (context PROMPT .. PROMPT + GEN), so "tgN @ dPROMPT"
# is the like-for-like decode and "ppPROMPT" (depth 0) the like-for-like prefill; the other two
# rows are printed for comparison with the tables before 2026-12-06, which had depth 0 only
# (on the Zen 5 that day, Qwen3-0.6B-dims Q4_0 one thread: tg64 65.9, tg64 @ d128 55.6 tok/s).
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERS=${LAYERS:-4} SRC=${SRC:-/tmp/cpu2/a3b$LAYERS} GGUF=${GGUF:-$SRC.gguf} Q4=${Q4:-$SRC-q4}
LCPP=${LCPP:-/tmp/llama.cpp} CINFER=${CINFER:-build-cpu/cinfer} BEFORE=${BEFORE:-} ALT=${ALT:-}
ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-"1 2"} PY=${PY:-python3} WHICH=${WHICH:-"bf16 q4"}
GEN=${GEN:-32} PROMPT=${PROMPT:-128} CONFIG=${CONFIG:-bench/qwen3-30b-a3b.config.json}
[ -f "$SRC/model.safetensors" ] || "$CINFER" make-random --config "$CONFIG" --out "$SRC" \
  --dtype bf16 --seed 1 --layers "$LAYERS"
case " $WHICH " in *" bf16 "*) [ -f "$GGUF" ] || "$PY" bench/make_bf16_gguf.py "$SRC" "$GGUF" "$LCPP" ;; esac
case " $WHICH " in *" q4 "*) [ -f "$Q4/q4_0.gguf" ] || "$PY" bench/make_q4_pair.py "$SRC" "$LAYERS" "$Q4" "$LCPP" ;; esac
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cpus)"
echo "llama.cpp: $(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo '?')"
cin() { # label binary model threads [flags]
  echo "== round $r threads $4 $1 (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
  "$2" bench --model "$3" --prompt-len "$PROMPT" --gen "$GEN" --threads "$4" ${5:-} 2>&1 | grep -Ei "prefill|decode|weights|machine"
}
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    for w in $WHICH; do
      if [ "$w" = bf16 ]; then cm=$SRC lg=$GGUF; else cm=$Q4/mlx4 lg=$Q4/q4_0.gguf; fi
      [ -z "$BEFORE" ] || cin "cinfer-before $w" "$BEFORE" "$cm" "$t"
      [ -z "$BEFORE" ] || [ -z "$ALT" ] || cin "cinfer-before $w $ALT" "$BEFORE" "$cm" "$t" "$ALT"
      cin "cinfer $w" "$CINFER" "$cm" "$t"
      [ -z "$ALT" ] || cin "cinfer $w $ALT" "$CINFER" "$cm" "$t" "$ALT"
      echo "== round $r threads $t llama.cpp $w (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
      "${LCPP_BIN:-$LCPP/build/bin}/llama-bench" -m "$lg" -p "$PROMPT" -n "$GEN" -d "0,$PROMPT" -t "$t" -r 2 2>/dev/null | grep -E "pp$PROMPT|tg$GEN"
    done
  done
done
