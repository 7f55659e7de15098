#!/usr/bin/env bash
# tune.sh — the CUDA backend's tuning switches side by side, on the GPU machine, from the
# repository root, with the same binary: each switch setting runs `cinfer bench --device
# cuda` on the same make-random checkpoint, settings alternating, ROUNDS rounds, so machine
# drift hits every setting alike. One line per run:
#   TUNE <model> <setting> r<round>: prefill <tok/s> decode <tok/s> [batch <tok/s> <gain>x]
# The switches (src/backend/cuda/cuda_internal.h; "default" = none set):
#   CINFER_CUDA_PDL=0|1  CINFER_CUDA_NORM_FUSE=0|1  CINFER_CUDA_FP8_ROWS2=0|1  CINFER_CUDA_MLA_DECODE=0|1
#   CINFER_CUDA_MOE_PIPE=0|1  CINFER_CUDA_MOE_SPLIT=0|1  CINFER_CUDA_DSA_SELECT=0|1  CINFER_CUDA_DSA_SCORE=0|1
#   CINFER_CUDA_Q_AFFINE_LOOP=0|1  CINFER_CUDA_Q_PAIR=0|1  CINFER_CUDA_Q_FP_LOOP=0|1
#   CINFER_CUDA_ATTN_DECODE2=0|1  CINFER_CUDA_DN_CHUNK=0|1|N (N: the chunked DeltaNet from N prompt tokens)
#   CINFER_CUDA_GEMV1=1..7 (an experiment: one kernel shape for the one-token GEMVs of <= 2048 columns, gemv.cu;
#   7: without the two-rows-a-warp rule for 1025..2048 columns)
# Usage: bash tests/gpu/tune.sh MODEL PROMPT_LEN GEN BATCH ROUNDS SETTING...
#   MODEL: qwen3-0.6b or qwen3-8b-12l (made by tests/gpu/bench.sh's recipe when missing)
#   BATCH: 0 for no --batch run; SETTING: "default" or VAR=V[,VAR=V...]
# Env: CINFER (default .gpu/cinfer), BENCH_DIR (default /tmp/cinfer-bench).
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 6 ] || { echo "usage: $0 MODEL PROMPT_LEN GEN BATCH ROUNDS SETTING..." >&2; exit 2; }
model=$1 plen=$2 gen=$3 batch=$4 rounds=$5; shift 5
[ -x .gpu/cinfer ] || [ ! -f .gpuz/gpu.tar.xz ] || tar xJf .gpuz/gpu.tar.xz   # the packed stage (stage.sh)
if [ -z "${CINFER:-}" ]; then CINFER=.gpu/cinfer; [ -x "$CINFER" ] || CINFER=build/cinfer; fi
[ -d .gpu/lib ] && export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BENCH_DIR=${BENCH_DIR:-/tmp/cinfer-bench}
dir=$BENCH_DIR/$model
if [ ! -d "$dir" ]; then
  case $model in
    qwen3-0.6b) cfg=bench/qwen3-0.6b.config.json layers=() ;;
    qwen3-8b-12l) cfg=bench/qwen3-8b.config.json layers=(--layers 12) ;;
    *) echo "tune: unknown model $model" >&2; exit 2 ;;
  esac
  mkdir -p "$BENCH_DIR"
  $CINFER make-random --config "$cfg" --out "$dir.part" --dtype bf16 --seed 1 "${layers[@]}" && mv "$dir.part" "$dir" ||
    { echo "tune: make-random $model failed" >&2; exit 1; }
fi
bargs=()
[ "$batch" -gt 0 ] && bargs=(--batch "$batch")
rc=0
for r in $(seq 1 "$rounds"); do
  for setting in "$@"; do
    envs=()
    [ "$setting" = default ] || IFS=, read -r -a envs <<<"$setting"
    out=$(env "${envs[@]}" $CINFER bench --model "$dir" --device cuda --prompt-len "$plen" --gen "$gen" "${bargs[@]}" 2>&1)
    if [ $? -ne 0 ]; then echo "TUNE $model $setting r$r: FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"; rc=1; continue; fi
    pp=$(echo "$out" | awk '/^prefill/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") { print $(i-1); exit } }')
    tg=$(echo "$out" | awk '/^decode / && !/batch/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") { print $(i-1); exit } }')
    bt=$(echo "$out" | awk '/^decode batch/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") { print $(i-1); exit } }')
    gain=$(echo "$out" | awk '/^batch gain/ { print $3; exit }')
    echo "TUNE $model $setting r$r: prefill ${pp:-?} decode ${tg:-?}${bt:+ batch $bt ${gain}}"
  done
done
exit $rc
