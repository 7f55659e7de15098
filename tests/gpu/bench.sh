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
# BENCH_ONLY=hyb: issue #17's side by side with llama.cpp's CUDA llama-bench (bench/stage_llamacpp.sh
# packs it into .gpuz/lcpp.tar.xz; unpacked here into .lcpp/) on the hybrid families, random bf16
# with real dimensions and the first layers of the real layer pattern:
#   lfm2-8b-a1b-8l              bench/lfm2-8b-a1b.config.json, 8 of 24 layers (conv conv attn conv
#                               conv conv attn conv; 2 dense + 6 MoE), ~4.8 GB
#   nemotron-3-nano-30b-a3b-6l  bench/nemotron-3-nano-30b-a3b.config.json, 6 of 52 (M E M E M *), ~6.5 GB
#   qwen3.5-35b-a3b-4l          bench/qwen3.5-35b-a3b.config.json, 4 of 40 (3 DeltaNet + 1 gated
#                               attention), ~8.2 GB
# each converted to a GGUF bf16 twin by bench/make_bf16_gguf.py (same bytes), then, engines
# alternating: cinfer bench (pp4096 + tg128) / llama-bench -p 4096 -n 128 / cinfer bench --depth
# 1024 and 32768 (tg128 there) / llama-bench -n 128 -d 1024,32768; all -fa 1 -ngl 99 on llama.cpp.
# Every step runs under `timeout`, and the whole entry under a budget (HYB_BUDGET seconds, default
# 540) so that one device call of 10 minutes holds it: a step that no longer fits is skipped and
# says so. "BENCH cinfer|llama.cpp <model> <test>: ..." lines, then a summary of them all.
# Knobs (defaults for the device): HYB_DEVICE (cuda), HYB_PP (4096), HYB_GEN (128), HYB_DEPTHS
# ("1024 32768"), HYB_REPS (llama-bench -r, 2), HYB_LB_ARGS (more llama-bench flags), HYB_SPECS
# ("name:config:layers ..." instead of the three above), LLAMA_BENCH (.lcpp/bin/llama-bench),
# LCPP_PY_DIR (the dir holding gguf-py/, default .lcpp), PY (python3).
# BENCH_ONLY=q4: issue #18's 4-bit row: the moe entry's qwen3-30b-a3b-12l (bf16, made here when
# missing) turned by bench/make_q4_pair.py into qwen3-30b-a3b-12l-mlx4 (mlx affine 4-bit group 64,
# routers 8-bit; ~4.6 GB) and its twin qwen3-30b-a3b-12l-q4_0.gguf (llama.cpp's qwen3moe, every
# matrix Q4_0; ~4.6 GB), the same random weights; then, engines alternating: cinfer bench on mlx4
# (pp512 + tg128; tg128 at --depth 4096) / llama-bench -p 512 -n 128 and -p 0 -n 128 -d 4096 (-fa 1
# -ngl 99) on the twin / cinfer bench on the bf16 checkpoint (the same two runs). Ratio lines: mlx4
# over llama.cpp for pp512, tg128 and tg128 @ d4096 (target 1.5x), mlx4 decode over bf16 decode
# (target 2.5x). Under a budget as hyb (Q4_BUDGET, 540); "BENCH ..." lines, a summary, and with
# $OUT set $OUT/q4-summary.txt and the logs. Knobs: Q4_CONFIG (bench/qwen3-30b-a3b.config.json),
# Q4_LAYERS (12), Q4_NAME (CONFIG-LAYERSl), Q4_PP (512), Q4_DEPTH (4096), Q4_GEN (128), Q4_DEVICE
# (cuda; cpu runs it all on the CPU, llama-bench ignoring -ngl), Q4_REPS (2), Q4_LB_ARGS,
# MAKE_Q4_JOBS (make_q4_pair's processes), LLAMA_BENCH, LCPP_PY_DIR, PY as hyb.
# BENCH_ONLY=v4: issue #18's V4 row, cinfer alone: deepseek-v4-flash-6l-fp8-fp4,
# bench/deepseek-v4-flash.config.json with 6 of its 43 layers (sliding, HCA, CSA, HCA, CSA, HCA;
# 3 hash-routed + 3 top-k MoE layers) made by make-random --dtype fp8-fp4 (fp8 matrices, FP4
# experts; 23.6 GB, run_v4 says how that is counted), then `cinfer inspect` (cache bytes per token
# at 1k / 64k / 1M, weights read per token) and cinfer bench: pp4096 + tg128, tg128 at --depth
# 1024 and 65536; decode GB/s on the bytes read per token against the device copy, the ratio
# d65536 / d1024 (target 0.85), $OUT/v4-summary.txt. Budget V4_BUDGET (540). Knobs: V4_CONFIG,
# V4_LAYERS (6), V4_NAME, V4_PP (4096), V4_DEPTHS ("1024 65536"), V4_GEN (128), V4_DEVICE (cuda),
# V4_MAKE_LIMIT (300 s), V4_CLEAN=1 removes this entry's checkpoint at its end (default: kept,
# as every entry keeps its own; nothing else is removed).
# Env: CINFER (default .gpu/cinfer, else build/cinfer), BENCH_DIR, BENCH_ONLY (0.6b, 8b, moe, moe4,
# ds, dsa, v3fp8, hyb, q4, v4).
set -u
cd "$(dirname "$0")/../.."
[ -x .gpu/cinfer ] || [ ! -f .gpuz/gpu.tar.xz ] || tar xJf .gpuz/gpu.tar.xz   # the packed stage (stage.sh)
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

# ---- BENCH_ONLY=hyb: cinfer against llama.cpp on the hybrid families (issue #17) ----
HYB_T0=$SECONDS
hyb_lines=()
hyb_step() { # LIMIT NAME CMD...: CMD under timeout, cut to what is left of HYB_BUDGET; 124 = skipped/timed out
  local limit=$1 name=$2; shift 2
  local left=$(( ${HYB_BUDGET:-540} - (SECONDS - HYB_T0) ))
  # its own lines go to fd 3 (run_hyb's stdout), whatever the caller redirects the command's output to
  if [ "$left" -lt 15 ]; then echo "BENCH $name: SKIPPED (budget of ${HYB_BUDGET:-540} s spent)" >&3; hyb_lines+=("BENCH $name: SKIPPED (budget)"); rc=1; return 124; fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS r
  timeout --kill-after=5 "$limit" "$@"; r=$?
  if [ $r -eq 124 ] || [ $r -eq 137 ]; then echo "BENCH $name: TIMEOUT after ${limit} s" >&3; hyb_lines+=("BENCH $name: TIMEOUT (${limit} s)"); rc=1
  elif [ $r -ne 0 ]; then echo "BENCH $name: FAILED (exit $r)" >&3; hyb_lines+=("BENCH $name: FAILED (exit $r)"); rc=1
  else echo "($name: $((SECONDS - t0)) s, $((SECONDS - HYB_T0)) s in all)" >&3; fi
  return $r
}

hyb_cinfer() { # NAME DEPTH PROMPT_LEN [LIMIT s, 150]: one cinfer bench, its BENCH line
  local m=$1 depth=$2 pl=$3 log="$BENCH_DIR/$1.cinfer.d$2.log"
  echo "== cinfer $m: bench --device $HYB_DEVICE --prompt-len $pl --gen $HYB_GEN --depth $depth"
  hyb_step "${4:-150}" "cinfer $m d$depth" $CINFER bench --model "$BENCH_DIR/$m" --device "$HYB_DEVICE" \
      --prompt-len "$pl" --gen "$HYB_GEN" --depth "$depth" >"$log" 2>&1; local r=$?
  cat "$log"
  [ $r -eq 0 ] || return
  local pp tg gbs pct copy line
  pp=$(awk '/^prefill/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' "$log" | head -1)
  tg=$(awk '/^decode / { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' "$log" | head -1)
  gbs=$(awk '/^decode GB\/s/ { print $3 }' "$log" | head -1)
  pct=$(grep -o '[0-9.]*% of the device copy' "$log" | head -1 | cut -d' ' -f1)
  copy=$(awk '/^device / { print $2 }' "$log" | head -1)
  if [ "$depth" -eq 0 ]; then line="BENCH cinfer $m pp$pl: ${pp:-?} tok/s; tg$HYB_GEN after $pl: ${tg:-?} tok/s = ${gbs:-?} GB/s weights = ${pct:-?} of copy ${copy:-?} GB/s"
  else line="BENCH cinfer $m tg$HYB_GEN @ d$depth: ${tg:-?} tok/s = ${gbs:-?} GB/s weights = ${pct:-?} of copy"; fi
  echo "$line"; hyb_lines+=("$line")
  echo "$tg" >"$BENCH_DIR/$m.cinfer.tg.d$depth"
  [ "$depth" -eq 0 ] && echo "$pp" >"$BENCH_DIR/$m.cinfer.pp"
}

hyb_llama() { # NAME TAG LLAMA-BENCH-ARGS...: one llama-bench run, a BENCH line per test
  local m=$1 tag=$2; shift 2
  local js="$BENCH_DIR/$m.lcpp.$tag.jsonl"
  echo "== llama.cpp $m: llama-bench -fa 1 -ngl 99 -r $HYB_REPS $* ${HYB_LB_ARGS:-}"
  # shellcheck disable=SC2086
  hyb_step 200 "llama.cpp $m $tag" env LD_LIBRARY_PATH="$LCPP_LIB" "$LLAMA_BENCH" -m "$BENCH_DIR/$m.gguf" \
      -fa 1 -ngl 99 -r "$HYB_REPS" "$@" ${HYB_LB_ARGS:-} -o jsonl >"$js" 2>"$js.err"; local r=$?
  grep -iE 'error|fail|abort|assert|ggml_cuda_init|found [0-9]+ CUDA|device [0-9]' "$js.err" | head -8
  [ $r -eq 0 ] || { tail -20 "$js.err"; return; }
  while IFS= read -r line; do echo "$line"; hyb_lines+=("$line"); done < <("$PY" - "$js" "$m" "$BENCH_DIR" <<'PYEOF'
import json, sys
js, m, d = sys.argv[1:4]
for ln in open(js):
    ln = ln.strip()
    if not ln.startswith("{"):
        continue
    r = json.loads(ln)
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    at = f" @ d{r['n_depth']}" if r["n_depth"] else ""
    print(f"BENCH llama.cpp {m} {test}{at}: {r['avg_ts']:.2f} +- {r['stddev_ts']:.2f} tok/s "
          f"({r.get('backends', '?')}, {r.get('gpu_info', '')}, ub {r.get('n_ubatch')}, fa {r.get('flash_attn')})")
    if r["n_gen"] and not r["n_prompt"]:
        open(f"{d}/{m}.lcpp.tg.d{r['n_depth']}", "w").write(f"{r['avg_ts']}\n")
    if r["n_prompt"] and not r["n_gen"] and not r["n_depth"]:
        open(f"{d}/{m}.lcpp.pp", "w").write(f"{r['avg_ts']}\n")
PYEOF
)
}

lcpp_setup() { # llama.cpp's side: unpacks .lcpp/, sets LLAMA_BENCH, LCPP_PY_DIR and LCPP_LIB (needs PY)
  [ -x .lcpp/bin/llama-bench ] || [ ! -f .gpuz/lcpp.tar.xz ] || tar xJf .gpuz/lcpp.tar.xz   # bench/stage_llamacpp.sh
  LLAMA_BENCH=${LLAMA_BENCH:-.lcpp/bin/llama-bench}
  LCPP_PY_DIR=${LCPP_PY_DIR:-.lcpp}
  LCPP_LIB="$PWD/.lcpp/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # libnccl.so.2 is not packed (stage_llamacpp.sh): the device's PyTorch wheel ships one
  local nccl
  nccl=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl" ] && [ -d "$nccl" ] && LCPP_LIB="$LCPP_LIB:$nccl"
}

run_hyb() {
  exec 3>&1
  HYB_DEVICE=${HYB_DEVICE:-cuda} HYB_PP=${HYB_PP:-4096} HYB_GEN=${HYB_GEN:-128}
  HYB_DEPTHS=${HYB_DEPTHS:-"1024 32768"} HYB_REPS=${HYB_REPS:-2} PY=${PY:-python3}
  lcpp_setup
  local specs=${HYB_SPECS:-"lfm2-8b-a1b-8l:bench/lfm2-8b-a1b.config.json:8 nemotron-3-nano-30b-a3b-6l:bench/nemotron-3-nano-30b-a3b.config.json:6 qwen3.5-35b-a3b-4l:bench/qwen3.5-35b-a3b.config.json:4"}
  echo "== hyb: $CINFER ($HYB_DEVICE) vs $LLAMA_BENCH; budget ${HYB_BUDGET:-540} s; disk: $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
  [ -x "$LLAMA_BENCH" ] || echo "BENCH llama.cpp: $LLAMA_BENCH missing (run bench/stage_llamacpp.sh and carry .gpuz): cinfer only"
  [ -f .lcpp/MANIFEST ] && head -3 .lcpp/MANIFEST
  nvidia-smi --query-gpu=name,memory.total,clocks.max.mem --format=csv,noheader 2>/dev/null | head -1
  "$PY" -c "import numpy" 2>/dev/null || echo "BENCH: $PY has no numpy: no GGUF twins, cinfer only"
  local spec m cfg layers depth
  for spec in $specs; do
    IFS=: read -r m cfg layers <<<"$spec"
    if [ ! -d "$BENCH_DIR/$m" ]; then
      echo "== make-random $m ($cfg, $layers layers)"
      rm -rf "$BENCH_DIR/$m.part"
      hyb_step 150 "make $m" $CINFER make-random --config "$cfg" --out "$BENCH_DIR/$m.part" --dtype bf16 --seed 1 \
          --layers "$layers" && mv "$BENCH_DIR/$m.part" "$BENCH_DIR/$m" && echo "made $m: $(du -sh "$BENCH_DIR/$m" | cut -f1)"
      [ -d "$BENCH_DIR/$m" ] || continue
    fi
    if [ -x "$LLAMA_BENCH" ] && [ ! -f "$BENCH_DIR/$m.gguf" ]; then
      echo "== make_bf16_gguf $m"
      hyb_step 150 "gguf $m" "$PY" bench/make_bf16_gguf.py "$BENCH_DIR/$m" "$BENCH_DIR/$m.gguf.part" "$LCPP_PY_DIR" &&
        mv "$BENCH_DIR/$m.gguf.part" "$BENCH_DIR/$m.gguf"
      rm -f "$BENCH_DIR/$m.gguf.part"
    fi
    echo "disk: $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
    local lb=0; [ -x "$LLAMA_BENCH" ] && [ -f "$BENCH_DIR/$m.gguf" ] && lb=1
    hyb_cinfer "$m" 0 "$HYB_PP"
    [ $lb = 1 ] && hyb_llama "$m" pp -p "$HYB_PP" -n "$HYB_GEN"
    for depth in $HYB_DEPTHS; do hyb_cinfer "$m" "$depth" 1; done
    [ $lb = 1 ] && hyb_llama "$m" depth -p 0 -n "$HYB_GEN" -d "$(echo $HYB_DEPTHS | tr ' ' ',')"
    # cinfer over llama.cpp: prefill at depth 0, decode at each depth (both at the same context;
    # the depth-0 decode rows differ: cinfer's follows its 4096-token prompt, llama-bench's does not)
    local a b tst
    for tst in pp $(for depth in $HYB_DEPTHS; do echo tg.d$depth; done); do
      a="$BENCH_DIR/$m.cinfer.$tst" b="$BENCH_DIR/$m.lcpp.$tst"
      if [ -s "$a" ] && [ -s "$b" ]; then
        local line
        line="BENCH ratio $m $( [ $tst = pp ] && echo "pp$HYB_PP" || echo "tg$HYB_GEN @ d${tst#tg.d}" ) cinfer / llama.cpp: $(awk -v a="$(cat "$a")" -v b="$(cat "$b")" 'BEGIN { printf "%.2fx", a / b }')"
        echo "$line"; hyb_lines+=("$line")
      fi
    done
    # decode at the longest depth over decode at the shortest (the linear-attention layers' share)
    local d0 d1 e
    d0=$(echo $HYB_DEPTHS | awk '{ print $1 }'); d1=$(echo $HYB_DEPTHS | awk '{ print $NF }')
    for e in cinfer lcpp; do
      if [ -s "$BENCH_DIR/$m.$e.tg.d$d0" ] && [ -s "$BENCH_DIR/$m.$e.tg.d$d1" ]; then
        local line
        line="BENCH $( [ $e = lcpp ] && echo llama.cpp || echo cinfer ) $m tg$HYB_GEN d$d1 / d$d0: $(awk -v a="$(cat "$BENCH_DIR/$m.$e.tg.d$d1")" -v b="$(cat "$BENCH_DIR/$m.$e.tg.d$d0")" 'BEGIN { printf "%.3f", a / b }')"
        echo "$line"; hyb_lines+=("$line")
      fi
    done
    rm -f "$BENCH_DIR/$m".*.tg.d* "$BENCH_DIR/$m".*.pp
  done
  echo "== hyb summary ($((SECONDS - HYB_T0)) s)"
  printf '%s\n' "${hyb_lines[@]}"
  # the per-run logs (cinfer bench output, llama-bench jsonl + stderr) come back with $OUT when set
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2>/dev/null; then
    cp "$BENCH_DIR"/*.cinfer.*.log "$BENCH_DIR"/*.lcpp.*.jsonl* "$OUT"/ 2>/dev/null
    printf '%s\n' "${hyb_lines[@]}" >"$OUT/hyb-summary.txt"
  fi
}

# A ratio of two numbers that hyb_cinfer / hyb_llama left in files, as a BENCH line (none when
# either is missing). LABEL A-FILE B-FILE [FORMAT, %.2fx]
ratio_line() {
  [ -s "$2" ] && [ -s "$3" ] || return 0
  local line
  line="$1: $(awk -v a="$(cat "$2")" -v b="$(cat "$3")" -v f="${4:-%.2fx}" 'BEGIN { printf f, a / b }')"
  echo "$line"; hyb_lines+=("$line")
}

bench_out() { # TAG FILES...: the summary lines to $OUT/TAG-summary.txt, the logs beside it (when OUT is set)
  local tag=$1; shift
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2>/dev/null; then
    cp "$@" "$OUT"/ 2>/dev/null
    printf '%s\n' "${hyb_lines[@]}" >"$OUT/$tag-summary.txt"
  fi
}

# ---- BENCH_ONLY=q4: a 4-bit mlx checkpoint against llama.cpp's Q4_0 twin and its own bf16 (issue #18) ----
run_q4() {
  exec 3>&1
  HYB_T0=$SECONDS HYB_BUDGET=${Q4_BUDGET:-540} PY=${PY:-python3}
  HYB_DEVICE=${Q4_DEVICE:-cuda} HYB_GEN=${Q4_GEN:-128} HYB_REPS=${Q4_REPS:-2} HYB_LB_ARGS=${Q4_LB_ARGS:-}
  local cfg=${Q4_CONFIG:-bench/qwen3-30b-a3b.config.json} layers=${Q4_LAYERS:-12} pp=${Q4_PP:-512} depth=${Q4_DEPTH:-4096}
  # the bf16 source: by default the moe entry's qwen3-30b-a3b-12l (shared with it on one machine)
  local m=${Q4_NAME:-$(basename "$cfg" .json | sed 's/\.config$//')-${layers}l}
  local q=$m-mlx4 g=$m-q4_0 part="$BENCH_DIR/$m.q4pair.part"
  lcpp_setup
  echo "== q4: $CINFER ($HYB_DEVICE) on $q and $m vs $LLAMA_BENCH on $g.gguf; budget $HYB_BUDGET s; disk: $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
  [ -x "$LLAMA_BENCH" ] || echo "BENCH llama.cpp: $LLAMA_BENCH missing (run bench/stage_llamacpp.sh and carry .gpuz): cinfer only"
  [ -f .lcpp/MANIFEST ] && head -3 .lcpp/MANIFEST
  nvidia-smi --query-gpu=name,memory.total,clocks.max.mem --format=csv,noheader 2>/dev/null | head -1
  if [ ! -d "$BENCH_DIR/$m" ]; then
    echo "== make-random $m ($cfg, $layers layers, bf16)"
    rm -rf "$BENCH_DIR/$m.part"
    hyb_step 240 "make $m" $CINFER make-random --config "$cfg" --out "$BENCH_DIR/$m.part" --dtype bf16 --seed 1 \
        --layers "$layers" && mv "$BENCH_DIR/$m.part" "$BENCH_DIR/$m" && echo "made $m: $(du -sh "$BENCH_DIR/$m" | cut -f1)"
    rm -rf "$BENCH_DIR/$m.part"
  fi
  # the pair (bench/make_q4_pair.py: mlx affine 4-bit group 64 and Q4_0, both 4.5 bits per weight);
  # mlx4 is complete once its config.json is there, the GGUF once the script has exited 0
  if [ -d "$BENCH_DIR/$m" ] && { [ ! -d "$BENCH_DIR/$q" ] || { [ -x "$LLAMA_BENCH" ] && [ ! -f "$BENCH_DIR/$g.gguf" ]; }; }; then
    echo "== make_q4_pair $m -> $q, $g.gguf"
    rm -rf "$part"
    hyb_step 300 "make_q4_pair $m" "$PY" bench/make_q4_pair.py "$BENCH_DIR/$m" "$layers" "$part" "$LCPP_PY_DIR"
    local r=$?
    [ ! -d "$BENCH_DIR/$q" ] && [ -f "$part/mlx4/config.json" ] && mv "$part/mlx4" "$BENCH_DIR/$q"
    [ $r -eq 0 ] && [ ! -f "$BENCH_DIR/$g.gguf" ] && [ -f "$part/q4_0.gguf" ] && mv "$part/q4_0.gguf" "$BENCH_DIR/$g.gguf"
    rm -rf "$part"
    [ -d "$BENCH_DIR/$q" ] && echo "$q: $(du -sh "$BENCH_DIR/$q" | cut -f1)"
    [ -f "$BENCH_DIR/$g.gguf" ] && echo "$g.gguf: $(du -sh "$BENCH_DIR/$g.gguf" | cut -f1)"
  fi
  echo "disk: $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
  local lb=0; [ -x "$LLAMA_BENCH" ] && [ -f "$BENCH_DIR/$g.gguf" ] && lb=1
  rm -f "$BENCH_DIR/$q".*.tg.d* "$BENCH_DIR/$q".*.pp "$BENCH_DIR/$g".*.tg.d* "$BENCH_DIR/$g".*.pp "$BENCH_DIR/$m".cinfer.tg.d* "$BENCH_DIR/$m".cinfer.pp
  # engines alternating: cinfer mlx4, llama.cpp Q4_0, cinfer mlx4 at depth, llama.cpp at depth, cinfer bf16 (both)
  [ -d "$BENCH_DIR/$q" ] && hyb_cinfer "$q" 0 "$pp"
  [ $lb = 1 ] && hyb_llama "$g" pp -p "$pp" -n "$HYB_GEN"
  [ -d "$BENCH_DIR/$q" ] && hyb_cinfer "$q" "$depth" 1
  [ $lb = 1 ] && hyb_llama "$g" depth -p 0 -n "$HYB_GEN" -d "$depth"
  if [ -d "$BENCH_DIR/$m" ]; then hyb_cinfer "$m" 0 "$pp"; hyb_cinfer "$m" "$depth" 1; fi
  # targets (issue #18): mlx4 >= 1.5x llama.cpp Q4_0 in prefill and decode, mlx4 decode >= 2.5x bf16
  # decode; cinfer's depth-0 decode follows its pp-token prompt, llama-bench's follows nothing
  local B=$BENCH_DIR
  ratio_line "BENCH ratio q4 pp$pp cinfer mlx4 / llama.cpp Q4_0 (target >= 1.5x)" "$B/$q.cinfer.pp" "$B/$g.lcpp.pp"
  ratio_line "BENCH ratio q4 tg$HYB_GEN cinfer mlx4 (after $pp) / llama.cpp Q4_0 (after 0) (target >= 1.5x)" "$B/$q.cinfer.tg.d0" "$B/$g.lcpp.tg.d0"
  ratio_line "BENCH ratio q4 tg$HYB_GEN @ d$depth cinfer mlx4 / llama.cpp Q4_0 (target >= 1.5x)" "$B/$q.cinfer.tg.d$depth" "$B/$g.lcpp.tg.d$depth"
  ratio_line "BENCH ratio q4 tg$HYB_GEN (after $pp) cinfer mlx4 / cinfer bf16 (target >= 2.5x)" "$B/$q.cinfer.tg.d0" "$B/$m.cinfer.tg.d0"
  ratio_line "BENCH ratio q4 tg$HYB_GEN @ d$depth cinfer mlx4 / cinfer bf16 (target >= 2.5x)" "$B/$q.cinfer.tg.d$depth" "$B/$m.cinfer.tg.d$depth"
  rm -f "$B/$q".*.tg.d* "$B/$q".*.pp "$B/$g".*.tg.d* "$B/$g".*.pp "$B/$m".cinfer.tg.d* "$B/$m".cinfer.pp
  echo "== q4 summary ($((SECONDS - HYB_T0)) s)"
  printf '%s\n' "${hyb_lines[@]}"
  bench_out q4 "$B/$q".cinfer.*.log "$B/$m".cinfer.*.log "$B/$g".lcpp.*.jsonl*
}

# ---- BENCH_ONLY=v4: DeepSeek V4-Flash dims, fp8 + FP4 experts, cinfer alone (issue #18) ----
# Checkpoint bytes for bench/deepseek-v4-flash.config.json as make-random --dtype fp8-fp4 writes
# it (fp8 matrices 1 byte + an E8M0 byte per 128x128 block, FP4 experts 0.5 byte + an E8M0 byte
# per 32, embedding / head / routers / compressor and indexer projections / mHC bf16; the sum
# checked to the byte against make-random on shrunken dims): embedding + head 2.12 GB, then per
# layer ~3.57-3.60 GB (256 experts x 3 x 2048 x 4096 FP4 = 3.42 GB, attention fp8 0.11 GB,
# shared expert 0.025 GB): 4 layers 16.4 GB, 5 20.0 GB, 6 23.6 GB, 7 27.2 GB. 6 layers keep
# it under ~24 GB of the 64 GB disk and hold every layer kind of the real pattern (sliding,
# HCA 128, CSA 4, HCA, CSA, HCA; 3 hash-routed MoE layers, 3 top-k).
run_v4() {
  exec 3>&1
  HYB_T0=$SECONDS HYB_BUDGET=${V4_BUDGET:-540} HYB_DEVICE=${V4_DEVICE:-cuda} HYB_GEN=${V4_GEN:-128}
  local cfg=${V4_CONFIG:-bench/deepseek-v4-flash.config.json} layers=${V4_LAYERS:-6} pp=${V4_PP:-4096}
  local depths=${V4_DEPTHS:-"1024 65536"} depth
  local m=${V4_NAME:-$(basename "$cfg" .json | sed 's/\.config$//')-${layers}l-fp8-fp4}
  echo "== v4: $CINFER ($HYB_DEVICE) on $m; budget $HYB_BUDGET s; disk: $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.mem --format=csv,noheader 2>/dev/null | head -1
  if [ ! -d "$BENCH_DIR/$m" ]; then
    echo "== make-random $m ($cfg, $layers layers, fp8-fp4)"
    rm -rf "$BENCH_DIR/$m.part"
    hyb_step "${V4_MAKE_LIMIT:-300}" "make $m" $CINFER make-random --config "$cfg" --out "$BENCH_DIR/$m.part" \
        --dtype fp8-fp4 --seed 1 --layers "$layers" && mv "$BENCH_DIR/$m.part" "$BENCH_DIR/$m" &&
      echo "made $m: $(du -sh "$BENCH_DIR/$m" | cut -f1)"
    rm -rf "$BENCH_DIR/$m.part"
    echo "disk: $(df -h "$BENCH_DIR" | awk 'NR == 2 { print $4 " free" }')"
  fi
  if [ -d "$BENCH_DIR/$m" ]; then
    local log="$BENCH_DIR/$m.inspect.log" line
    echo "== cinfer inspect --model $m"
    hyb_step 120 "inspect $m" $CINFER inspect --model "$BENCH_DIR/$m" >"$log" 2>&1
    cat "$log"
    for k in 1k 64k 1m; do
      line=$(awk -v k="cache_bytes_at_$k" '$1 == k { print $2 " B" , $3, $4 }' "$log")
      [ -n "$line" ] && { line="BENCH cinfer $m cache at $k tokens: $line"; echo "$line"; hyb_lines+=("$line"); }
    done
    line=$(awk '$1 == "decode_weight_bytes" { print $2, $3 }' "$log")
    [ -n "$line" ] && { line="BENCH cinfer $m weights read per decoded token (inspect): $line"; echo "$line"; hyb_lines+=("$line"); }
    rm -f "$BENCH_DIR/$m".cinfer.tg.d* "$BENCH_DIR/$m".cinfer.pp
    hyb_cinfer "$m" 0 "$pp" 240
    line=$(awk '/^weights\/tok/ { print $2, $3 }' "$BENCH_DIR/$m.cinfer.d0.log" 2>/dev/null)
    [ -n "$line" ] && { line="BENCH cinfer $m weights read per decoded token (bench): $line"; echo "$line"; hyb_lines+=("$line"); }
    for depth in $depths; do hyb_cinfer "$m" "$depth" 1 300; done
    local d0 d1
    d0=$(echo $depths | awk '{ print $1 }'); d1=$(echo $depths | awk '{ print $NF }')
    [ "$d0" = "$d1" ] || ratio_line "BENCH cinfer $m tg$HYB_GEN d$d1 / d$d0 (target >= 0.85)" \
        "$BENCH_DIR/$m.cinfer.tg.d$d1" "$BENCH_DIR/$m.cinfer.tg.d$d0" "%.3f"
    rm -f "$BENCH_DIR/$m".cinfer.tg.d* "$BENCH_DIR/$m".cinfer.pp
  fi
  echo "== v4 summary ($((SECONDS - HYB_T0)) s)"
  printf '%s\n' "${hyb_lines[@]}"
  bench_out v4 "$BENCH_DIR/$m".cinfer.*.log "$BENCH_DIR/$m.inspect.log"
  # V4_CLEAN=1: this entry's checkpoint goes (it is the largest on a shared 64 GB disk); nothing else
  if [ "${V4_CLEAN:-0}" = 1 ] && [ -d "$BENCH_DIR/$m" ]; then rm -rf "${BENCH_DIR:?}/$m"; echo "removed $BENCH_DIR/$m (V4_CLEAN=1)"; fi
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
  hyb) run_hyb; exit $rc ;;
  q4) run_q4; exit $rc ;;
  v4) run_v4; exit $rc ;;
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
