#!/usr/bin/env bash
# CPU benchmarks recorded in bench/RESULTS.md. Makes the random-weight checkpoints (bf16,
# with `cinfer make-random`) under $BENCH_DIR (default /tmp/cinfer-bench; ~40 GB of disk
# for all three, made once), then runs `cinfer bench` on each. Run on a quiet machine:
#   bash bench/run_cpu.sh [qwen3-0.6b] [dsv2-lite] [qwen3-30b-a3b] [dsv4-flash]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BENCH_DIR:-/tmp/cinfer-bench}
mkdir -p "$dir"
want=${*:-qwen3-0.6b dsv2-lite qwen3-30b-a3b}
make_ck() { # name config layers [dtype]
  [ -f "$dir/$1/model.safetensors" ] && return
  local lf=(); [ "$3" != 0 ] && lf=(--layers "$3")
  build/cinfer make-random --config "bench/$2" --out "$dir/$1" --dtype "${4:-bf16}" --seed 1 "${lf[@]}"
}
for w in $want; do
  case $w in
  qwen3-0.6b)    make_ck qwen3-0.6b qwen3-0.6b.config.json 0 ;;
  dsv2-lite)     make_ck dsv2-lite deepseek-v2-lite-dims.config.json 14 ;;  # 15.1 GiB: fits 16 GiB
  qwen3-30b-a3b) make_ck qwen3-30b-a3b qwen3-30b-a3b.config.json 14 ;;       # 16.4 GiB of 24
  dsv4-flash)    make_ck dsv4-flash deepseek-v4-flash.config.json 4 fp8-fp4 ;;  # the real formats, 4 of 43 layers
  *) echo "unknown bench '$w'" >&2; exit 2 ;;
  esac
  echo "== $w"
  build/cinfer inspect --model "$dir/$w" | grep -E "parameters|bytes |kv_bytes|cache_bytes|decode_weight"
  build/cinfer bench --model "$dir/$w" --prompt-len 128 --gen 64
done
