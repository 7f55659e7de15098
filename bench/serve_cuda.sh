#!/usr/bin/env bash
# serve_cuda.sh — issue #19's serving runs, ON the GPU machine, from the repository root: `cinfer
# serve --device cuda` beside llama-server (llama.cpp CUDA, the same random weights as a GGUF bf16
# twin), one load generator driving both (bench/serve_load.py: streamed /v1/completions of
# token-id prompts, 200..2000 ids, 256 generated with ignore_eos).
#
# Per model of SERVE_SPECS ("name:config:layers ...", default the Qwen3-8B dims and the
# Qwen3-30B-A3B dims cut to 12 layers, as bench.sh's 8b / moe entries) and per step of
# SERVE_STEPS (default "make check bench chat"):
#   make   cinfer make-random (bf16, seed 1) into $BENCH_DIR/NAME unless there, the demo model's
#          tokenizer beside it with a placeholder text for every other id (prompts stay below
#          4096 ids), and NAME.gguf by
#          bench/make_bf16_gguf.py when llama-server is staged (.lcpp/bin/llama-server)
#   check  serve_load.py check on cinfer alone: N concurrent seeded requests each equal to the
#          same request alone, a cached second turn, a soak with hang-ups, then an idle pool
#   bench  cinfer (--parallel 64 --ctx 2304, --gpu-memory SERVE_GPU_MEM) and llama-server (-np 64
#          -c 64*2304 -fa on -ngl 99) up together, serve_load.py bench at SERVE_LEVELS
#          (1,8,32,64), SERVE_PER requests per stream (2), engines alternating level by level
#   chat   5-turn chats (prompts growing from 1000 ids by 316 per turn, 64 generated), cinfer with
#          prefix reuse against a second cinfer with --prefix-cache-mb 0: turn-k TTFT medians
# Lines "LOAD ...", "CHAT ...", "PASS/FAIL ..." on stdout; with OUT set, the servers' logs and
# $OUT/serve-summary.txt. SERVE_DEVICE=cpu runs cinfer on the CPU (a dry run of the script). Every step runs under timeout; SERVE_BUDGET (540 s) bounds the whole.
set -u
cd "$(dirname "$0")/.."
[ -x .gpu/cinfer ] || [ ! -f .gpuz/gpu.tar.xz ] || tar xJf .gpuz/gpu.tar.xz
[ -d .lcpp ] || [ ! -f .gpuz/lcpp.tar.xz ] || tar xJf .gpuz/lcpp.tar.xz
CINFER=${CINFER:-.gpu/cinfer}
[ -d .gpu/lib ] && export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=${PY:-python3}
BENCH_DIR=${BENCH_DIR:-/tmp/cinfer-bench}
SPECS=${SERVE_SPECS:-"qwen3-8b-12l:bench/qwen3-8b.config.json:12 qwen3-30b-a3b-12l:bench/qwen3-30b-a3b.config.json:12"}
STEPS=${SERVE_STEPS:-"make check bench chat"}
LEVELS=${SERVE_LEVELS:-1,8,32,64}
PER=${SERVE_PER:-2}
GPU_MEM=${SERVE_GPU_MEM:-0.45}
BUDGET=${SERVE_BUDGET:-540}
LSRV=${LLAMA_SERVER:-.lcpp/bin/llama-server}
LCPP_LIB="$PWD/.lcpp/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nccl=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$nccl" ] && [ -d "$nccl" ] && LCPP_LIB="$LCPP_LIB:$nccl"
LOGS=${OUT:-$BENCH_DIR}/serve-logs
mkdir -p "$BENCH_DIR" "$LOGS"
T0=$SECONDS
lines=()
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT
say() { echo "$*"; lines+=("$*"); }
left() { echo $((BUDGET - (SECONDS - T0))); }
step() { # LIMIT CMD...: under timeout, cut to what is left of the budget
  local lim=$1; shift
  local l; l=$(left)
  [ "$l" -lt "$lim" ] && lim=$l
  [ "$lim" -lt 10 ] && { say "SKIP (budget): $*"; return 124; }
  timeout --kill-after=5 "$lim" "$@"
}
wait_url() { # URL PID SECONDS: 0 once URL answers (llama-server /health, cinfer /v1/models)
  local i
  for i in $(seq 1 $(($3 * 5))); do
    "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
start_cinfer() { # NAME PORT ARGS...: sets PID
  local name=$1 port=$2; shift 2
  "$CINFER" serve --model "$BENCH_DIR/$name" --device "${SERVE_DEVICE:-cuda}" --port "$port" "$@" 2>"$LOGS/$name.cinfer.$port.log" &
  PID=$!; PIDS+=("$PID")
  wait_url "http://127.0.0.1:$port/v1/models" "$PID" 120 || { say "FAIL cinfer serve $name: $(tail -2 "$LOGS/$name.cinfer.$port.log")"; return 1; }
  grep "cinfer: serve:" "$LOGS/$name.cinfer.$port.log" | head -1
}
start_llama() { # NAME PORT: sets PID
  local name=$1 port=$2
  LD_LIBRARY_PATH=$LCPP_LIB "$LSRV" -m "$BENCH_DIR/$name.gguf" -ngl 99 -np 64 -c $((64 * 2304)) -fa on \
      --host 127.0.0.1 --port "$port" >"$LOGS/$name.llama.log" 2>&1 &
  PID=$!; PIDS+=("$PID")
  wait_url "http://127.0.0.1:$port/health" "$PID" 180 || { say "FAIL llama-server $name: $(tail -2 "$LOGS/$name.llama.log")"; return 1; }
}
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

echo "== serve: $CINFER vs $LSRV; budget $BUDGET s; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1); disk $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
[ -x "$LSRV" ] || echo "serve: $LSRV missing: cinfer only"
for spec in $SPECS; do
  IFS=: read -r m cfg layers <<<"$spec"
  for st in $STEPS; do
    case $st in
      make)
        if [ ! -d "$BENCH_DIR/$m" ]; then
          rm -rf "$BENCH_DIR/$m.part"
          step 200 "$CINFER" make-random --config "$cfg" --out "$BENCH_DIR/$m.part" --dtype bf16 --seed 1 --layers "$layers" &&
            mv "$BENCH_DIR/$m.part" "$BENCH_DIR/$m" && echo "made $m: $(du -sh "$BENCH_DIR/$m" | cut -f1)"
        fi
        # the demo model's tokenizer, with a placeholder text for every id of the vocabulary
        # (bench/extend_tokenizer.py: else ids without text would hold back the first chunk)
        [ -d "$BENCH_DIR/$m" ] && "$PY" bench/extend_tokenizer.py models/demo "$BENCH_DIR/$m" \
            "$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$cfg")"
        if [ -x "$LSRV" ] && [ -d "$BENCH_DIR/$m" ] && [ ! -f "$BENCH_DIR/$m.gguf" ]; then
          step 200 "$PY" bench/make_bf16_gguf.py "$BENCH_DIR/$m" "$BENCH_DIR/$m.gguf.part" .lcpp &&
            mv "$BENCH_DIR/$m.gguf.part" "$BENCH_DIR/$m.gguf"
          rm -f "$BENCH_DIR/$m.gguf.part"
        fi ;;
      check)
        start_cinfer "$m" 18080 --parallel 16 --ctx 2304 --gpu-memory "$GPU_MEM" || continue
        A=$PID
        while read -r l; do say "$m $l"; done < <(step 200 "$PY" bench/serve_load.py check http://127.0.0.1:18080 --n 8 --soak 30 --max 1500)
        stop "$A" ;;
      bench)
        start_cinfer "$m" 18080 --parallel 64 --ctx 2304 --gpu-memory "$GPU_MEM" || continue
        A=$PID; urls=http://127.0.0.1:18080; names=cinfer
        if [ -x "$LSRV" ] && [ -f "$BENCH_DIR/$m.gguf" ] && start_llama "$m" 18081; then
          urls="$urls,http://127.0.0.1:18081"; names="$names,llama.cpp"
        fi
        while read -r l; do say "$m $l"; done < <(step 400 "$PY" bench/serve_load.py bench "$urls" --names "$names" \
            --levels "$LEVELS" --per-stream "$PER" --gen 256 --min 200 --max 2000)
        stop "$A"; [ "$names" != cinfer ] && stop "$PID" ;;
      chat)
        start_cinfer "$m" 18080 --parallel 4 --ctx 4096 --gpu-memory 0.2 || continue
        A=$PID
        start_cinfer "$m" 18082 --parallel 4 --ctx 4096 --gpu-memory 0.4 --prefix-cache-mb 0 || { stop "$A"; continue; }
        B=$PID
        while read -r l; do say "$m $l"; done < <(step 150 "$PY" bench/serve_load.py chat http://127.0.0.1:18080,http://127.0.0.1:18082 \
            --names reuse,no-reuse --turns 5 --reps 3 --gen 64 --min 1000)
        stop "$A"; stop "$B" ;;
    esac
  done
done
echo "== serve summary ($((SECONDS - T0)) s)"
printf '%s\n' "${lines[@]}"
[ -n "${OUT:-}" ] && printf '%s\n' "${lines[@]}" >"$OUT/serve-summary.txt"
exit 0
