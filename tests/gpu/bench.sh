#!/usr/bin/env bash
# bench.sh — the CUDA speed runs of issue 14 section 5, on the GPU machine, from the
# repository root (tests/gpu/run.sh --bench calls it; it also runs alone).
#
# Makes two random bf16 checkpoints with `cinfer make-random` (kept in $BENCH_DIR between
# runs of one machine, default /tmp/cinfer-bench):
#   qwen3-0.6b      bench/qwen3-0.6b.config.json, all 28 layers (1.2 GB of weights)
#   qwen3-8b-12l    bench/qwen3-8b.config.json cut to 12 of its 36 layers (~5.9 GB read per
#                   token: the dimensions of the llama.cpp table in issue 14)
# and runs `cinfer bench --device cuda` on each at --prompt-len 512 and 4096 with --gen 128
# (pp512 / pp4096 prefill tok/s; decode tok/s at short context and after 4096 tokens, with
# the GB/s it implies next to the device copy probe). Then bench_gemv_cuda (the decode GEMV
# against the copy bandwidth) when staged. All output goes to stdout; a line
# "BENCH <model> pp<N>: ..." per run summarises it.
# With BENCH_ONLY=moe (or moe4) instead: qwen3-30b-a3b-12l (4l), bench/qwen3-30b-a3b.config.json
# cut to 12 (4) of its 48 layers: the MoE row of the issue 16 table.
# BENCH_ONLY=ds: deepseek-v2-lite-q1024-14l, bench/deepseek-v2-lite-dims.config.json with
# q_lora_rank 1024, 14 of its 27 layers, bf16 (the DeepSeek row of the issue 16 table), and
# its fp8 twin (make-random --dtype fp8: 128x128 block scales), at 512 and 4096 tokens.
# BENCH_ONLY=dsa: deepseek-v32-lite-4l, the same dimensions as deepseek_v32 with V3.2's indexer
# (64 heads x 128, top-2048), 4 layers, at 512, 8192 and 32768 tokens (sparse attention keeps
# decode nearly flat with context).
# BENCH_ONLY=v3fp8: deepseek-v3-5l-fp8, bench/deepseek-v3.config.json (DeepSeek-V3 dims: 256
# experts of 7168 x 2048, 128 heads) in fp8 with 5 of 61 layers (3 dense + 2 MoE, ~25 GB: what
# the device machine's 64 GB disk holds beside the others), at 512 and 4096 tokens.
# Env: CINFER (default .gpu/cinfer, else build/cinfer), BENCH_DIR, BENCH_ONLY (0.6b, 8b, moe, moe4,
# ds, dsa, v3fp8).
set -u
cd "$(dirname "$0")/../.."
if [ -z "${CINFER:-}" ]; then CINFER=.gpu/cinfer; [ -x "$CINFER" ] || CINFER=build/cinfer; fi
# staged binaries find their libraries in .gpu/lib (run.sh sets this too; bench.sh also runs alone)
[ -d .gpu/lib ] && export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CINFER_CUDA_UNVERIFIED=1   # families whose CUDA path is not verified yet run here too (registry.h)
BENCH_DIR=${BENCH_DIR:-/tmp/cinfer-bench}
mkdir -p "$BENCH_DIR"
rc=0

make_model() { # NAME CONFIG LAYERS(0 = all) [DTYPE]
  local dir="$BENCH_DIR/$1" t0=$SECONDS
  [ -d "$dir" ] && return 0                  # made by an earlier run on this machine
  rm -rf "$dir.part"
  local layers=()
  [ "$3" -gt 0 ] && layers=(--layers "$3")
  $CINFER make-random --config "$2" --out "$dir.part" --dtype "${4:-bf16}" --seed 1 "${layers[@]}" && mv "$dir.part" "$dir" ||
    { echo "bench: make-random $1 failed"; return 1; }
  echo "made $1 in $((SECONDS - t0)) s: $(du -sh "$dir" | cut -f1)"
}

run_bench() { # NAME PROMPT_LEN
  local out
  echo "== $1: bench --device cuda --prompt-len $2 --gen 128"
  out=$($CINFER bench --model "$BENCH_DIR/$1" --device cuda --prompt-len "$2" --gen 128 2>&1); local r=$?
  echo "$out"
  if [ $r -ne 0 ]; then echo "BENCH $1 pp$2: FAILED (exit $r)"; rc=1; return; fi
  local pp tg gbs
  pp=$(echo "$out" | awk '/^prefill/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' | head -1)
  tg=$(echo "$out" | awk '/^decode / { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' | head -1)
  gbs=$(echo "$out" | awk '/^decode GB\/s/ { print $3 }' | head -1)
  echo "BENCH $1 pp$2: prefill ${pp:-?} tok/s, decode ${tg:-?} tok/s (${gbs:-?} GB/s weights) after $2 tokens"
}

models=()
case "${BENCH_ONLY:-}" in
  0.6b) models=(qwen3-0.6b) ;;
  8b) models=(qwen3-8b-12l) ;;
  moe) models=(qwen3-30b-a3b-12l) ;;
  moe4) models=(qwen3-30b-a3b-4l) ;;
  ds) models=(deepseek-v2-lite-q1024-14l deepseek-v2-lite-q1024-14l-fp8) ;;
  dsa) models=(deepseek-v32-lite-4l) ;;
  v3fp8) models=(deepseek-v3-5l-fp8) ;;
  *) models=(qwen3-0.6b qwen3-8b-12l) ;;
esac
for m in "${models[@]}"; do
  case $m in
    qwen3-0.6b) make_model "$m" bench/qwen3-0.6b.config.json 0 || { rc=1; continue; } ;;
    qwen3-8b-12l) make_model "$m" bench/qwen3-8b.config.json 12 || { rc=1; continue; } ;;
    qwen3-30b-a3b-12l) make_model "$m" bench/qwen3-30b-a3b.config.json 12 || { rc=1; continue; } ;;
    qwen3-30b-a3b-4l) make_model "$m" bench/qwen3-30b-a3b.config.json 4 || { rc=1; continue; } ;;
    deepseek-v2-lite-q1024-14l*)
      sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json >"$BENCH_DIR/ds-q1024.json"
      dt=bf16; case $m in *-fp8) dt=fp8 ;; esac
      make_model "$m" "$BENCH_DIR/ds-q1024.json" 14 $dt || { rc=1; continue; } ;;
    deepseek-v3-5l-fp8) make_model "$m" bench/deepseek-v3.config.json 5 fp8 || { rc=1; continue; } ;;
    deepseek-v32-lite-4l)
      sed -e 's/"q_lora_rank": null/"q_lora_rank": 1024/' -e 's/"deepseek_v3"/"deepseek_v32"/' \
          -e 's/"DeepseekV3ForCausalLM"/"DeepseekV32ForCausalLM"/' \
          -e 's/"n_group": 1,/"n_group": 1, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,/' \
          bench/deepseek-v2-lite-dims.config.json >"$BENCH_DIR/dsv32.json"
      make_model "$m" "$BENCH_DIR/dsv32.json" 4 || { rc=1; continue; }
      run_bench "$m" 512; run_bench "$m" 8192; run_bench "$m" 32768
      continue ;;
  esac
  run_bench "$m" 512
  run_bench "$m" 4096
done

gemv=""
for g in .gpu/bench_gemv_cuda build/bench_gemv_cuda; do [ -x "$g" ] && { gemv=$g; break; }; done
if [ -n "$gemv" ]; then
  echo "== $gemv"
  $gemv || rc=1
fi
exit $rc
