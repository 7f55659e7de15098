#!/usr/bin/env bash
# --mlx-amx's one-token decode with its params copy (CINFER_CPU_MLX_PTILES=1, the default) and without it (0),
# beside llama.cpp's decode at the same depth (bench/RESULTS.md, issue #15, 2026-12-06): per round and thread
# count, `cinfer bench --prompt-len 128 --gen 128 --reps 3` (context 128..256, the median of 3) both ways, then
# `llama-bench -p 0 -n 128 -d 128 -r 3`, on the MLX 4-bit / Q4_0 pairs of bench/make_q4_pair.py.
#   PAIRS    directories holding mlx4/ and q4_0.gguf (default /tmp/q06-q4 /tmp/a3b4-q4)
#   CINFER   the cinfer binary (default build/cinfer); LCPP_BIN the directory of llama-bench
#   ROUNDS THREADS  2, "1 2"
set -euo pipefail
cd "$(dirname "$0")/.."
CINFER=${CINFER:-build/cinfer} LCPP_BIN=${LCPP_BIN:-/tmp/llama.cpp/build/bin} PAIRS=${PAIRS:-"/tmp/q06-q4 /tmp/a3b4-q4"}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cpus)"
for r in $(seq "${ROUNDS:-2}"); do for th in ${THREADS:-1 2}; do for m in $PAIRS; do
  d() { CINFER_CPU_MLX_PTILES=$1 "$CINFER" bench --model "$m/mlx4" --prompt-len 128 --gen 128 --reps 3 --threads "$th" --mlx-amx 2>&1 |
        grep -E '^decode  ' | grep -o '= [0-9.]*'; }
  echo "round $r threads $th $(basename "$m"): p=0 $(d 0) p=1 $(d 1) llama.cpp $("$LCPP_BIN/llama-bench" -m "$m/q4_0.gguf" \
        -p 0 -n 128 -d 128 -t "$th" -r 3 2>/dev/null | grep -E 'tg128' | awk -F'|' '{print $(NF-1)}')"
done; done; done
