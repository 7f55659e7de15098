#!/usr/bin/env bash
# CPU side-by-side of cinfer and llama.cpp on the hybrid families (issue #15): the same random bf16
# weights as tests/gpu/bench.sh's BENCH_ONLY=hyb (real dimensions, the first layers of the real
# layer pattern) and their GGUF bf16 twins; prefill PROMPT and decode GEN, THREADS, the engines
# alternating, ROUNDS rounds, loadavg printed before every run.
#   DIR     where the checkpoints live (made here if missing, with their twins):
#             lfm2-8b-a1b-8l              bench/lfm2-8b-a1b.config.json, 8 layers (~4.9 GB)
#             qwen3.5-35b-a3b-4l          bench/qwen3.5-35b-a3b.config.json, 4 layers (~8.8 GB)
#             nemotron-3-nano-30b-a3b-6l  bench/nemotron-3-nano-30b-a3b.config.json, 6 layers (~6.9 GB)
#           and NAME.gguf beside each (bench/make_bf16_gguf.py)
#   LCPP    a llama.cpp checkout with build/bin/llama-bench (see bench/run_llamacpp_moe.sh; LCPP_BIN as there)
#   CINFER  the cinfer binary; BEFORE / ALT as in bench/run_llamacpp_moe.sh
#   PY      a python3 with numpy (the GGUF writer only)
#   WHICH   names from the list above (default: all three)
#   GEN PROMPT THREADS ROUNDS  decode tokens (32), prompt tokens (128), "1 2", 2
#   REPS    cinfer bench --reps (default 2, as llama-bench's -r 2 here; 1 leaves the flag out, for
#           a BEFORE binary older than it)
# llama-bench runs -d "0,PROMPT": its tg test starts from an empty cache unless given a depth,
# while cinfer bench decodes after its prompt (context PROMPT .. PROMPT + GEN), so "tgN @ dPROMPT"
# is the like-for-like decode and "ppPROMPT" (depth 0) the like-for-like prefill; the other two
# rows are printed for comparison with the tables before 2026-12-06, which had depth 0 only
# (on the Zen 5 that day, Qwen3-0.6B-dims Q4_0 one thread: tg64 65.9, tg64 @ d128 55.6 tok/s).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DIR:-/tmp/hyb} LCPP=${LCPP:-/tmp/llama.cpp} CINFER=${CINFER:-build-cpu/cinfer} BEFORE=${BEFORE:-} ALT=${ALT:-}
ROUNDS=${ROUNDS:-2} REPS=${REPS:-2} THREADS=${THREADS:-"1 2"} PY=${PY:-python3} GEN=${GEN:-32} PROMPT=${PROMPT:-128}
WHICH=${WHICH:-"lfm2-8b-a1b-8l qwen3.5-35b-a3b-4l nemotron-3-nano-30b-a3b-6l"}
spec() { case $1 in
  lfm2-8b-a1b-8l) echo "bench/lfm2-8b-a1b.config.json 8" ;;
  qwen3.5-35b-a3b-4l) echo "bench/qwen3.5-35b-a3b.config.json 4" ;;
  nemotron-3-nano-30b-a3b-6l) echo "bench/nemotron-3-nano-30b-a3b.config.json 6" ;;
  *) echo "run_llamacpp_hybrid.sh: unknown checkpoint '$1'" >&2; exit 2 ;; esac; }
for m in $WHICH; do
  read -r cfg layers <<<"$(spec "$m")"
  [ -f "$DIR/$m/model.safetensors" ] || "$CINFER" make-random --config "$cfg" --out "$DIR/$m" --dtype bf16 --seed 1 --layers "$layers"
  [ -f "$DIR/$m.gguf" ] || "$PY" bench/make_bf16_gguf.py "$DIR/$m" "$DIR/$m.gguf" "$LCPP"
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cpus)"
echo "llama.cpp: $(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo '?')"
reps_arg=(); [ "$REPS" -gt 1 ] && reps_arg=(--reps "$REPS")
cin() { # label binary model threads [flags]
  echo "== round $r threads $4 $1 (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
  "$2" bench --model "$3" --prompt-len "$PROMPT" --gen "$GEN" --threads "$4" "${reps_arg[@]}" ${5:-} 2>&1 | grep -Ei "^prefill|^decode|^reps|weights|machine"
}
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    for m in $WHICH; do
      [ -z "$BEFORE" ] || cin "cinfer-before $m" "$BEFORE" "$DIR/$m" "$t"
      cin "cinfer $m" "$CINFER" "$DIR/$m" "$t"
      [ -z "$ALT" ] || cin "cinfer $m $ALT" "$CINFER" "$DIR/$m" "$t" "$ALT"
      echo "== round $r threads $t llama.cpp $m (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
      "${LCPP_BIN:-$LCPP/build/bin}/llama-bench" -m "$DIR/$m.gguf" -p "$PROMPT" -n "$GEN" -d "0,$PROMPT" -t "$t" -r 2 2>/dev/null | grep -E "pp$PROMPT|tg$GEN"
    done
  done
done
