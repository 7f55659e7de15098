#!/usr/bin/env bash
# run.sh — the GPU suite, the one script run ON the GPU machine (an H200 with CUDA 13,
# compute-sanitizer and python3), from the repository root, with .gpu/ carried from a
# development machine (tests/gpu/stage.sh packs the binaries built there and their libraries;
# the machine has no Debian -dev libraries to build with).
#
# Steps, each under a time limit, each writing its log to $OUT/logs ($OUT: default ./gpu-out),
# packed at the end into $OUT/logs.tar.gz beside $OUT/summary.txt (a device call returns only
# a few files; a run cut short leaves the loose logs):
#   device      nvidia-smi -L, the staged MANIFEST, the machine's glibc
#   ops         .gpu/tests/test_cuda_ops: every CUDA op against the CPU backend
#   ops-alt     the same (--quick) with every CUDA switch of cuda_internal.h away from its default
#   ops-flash   the attention ops (--quick) on the prefill kernels the defaults do not take, and
#               decode's qk_rope_store as its own launch (CINFER_CUDA_ROPE_FUSE=0)
#   batch       .gpu/tests/test_batch_argmax with CINFER_TEST_DEVICE=cuda: batched decode rows =
#               each row alone, on the device; .gpu/tests/test_paged: a shared block pool there
#               (every paged family, the hybrids' states restored, copy on write, batch steps
#               replayed from graphs = eager)
#   snapshot    .gpu/tests/test_snapshot with CINFER_TEST_DEVICE=cuda: hybrid cache snapshots kept
#               and restored in device memory, logits after a restore = the uninterrupted run's
#   parity      tests/gpu/parity.sh: llama / qwen3 fixtures on the device against transformers
#   memcheck    compute-sanitizer --tool memcheck over test_cuda_ops --quick, and over one
#               logits --step (graph replay) and one greedy generate on a bf16 fixture, then
#               logits --step on a DSA, an LFM2-MoE, a Mamba2, two DeltaNet fixtures and an
#               MLX-quantized DeepSeek V3 (packed matmuls, MLA heads, experts, embedding)
#   generate    one short cinfer generate --device cuda --stats
#   serve       cinfer serve --device cuda on an f32 fixture (demo tokenizer beside it) with a small
#   serve-dsa   block pool (serve-dsa: the deepseek_v32 fixture's MLA latents and indexer keys paged;
#   serve-qh    serve-qh / serve-nh: the qwen3_5 and nemotron_h hybrids, attention rows paged;
#   serve-v4    serve-v4: the deepseek_v4_hub fixture's compressed entries paged),
#               bench/serve_load.py check: concurrent seeded = alone, a cached second
#               turn, a soak with hang-ups, an idle pool and no 5xx
#   serve-paged tests/cli/serve_paged.sh with SERVE_DEVICE=cuda: preemption on a 6-block pool there
#   serve-e2e   tests/cli/server.sh with SERVE_DEVICE=cuda: the server's end-to-end suite (OpenAI,
#               Anthropic and Responses routes, SSE, tools, JSON mode, logprobs, metrics, errors) on
#               the device; its JavaScript checks through tests/cli/jsexpr.py (no node there), the
#               npm client's checks skipped; server D needs .cache/tokenizers/qwen3/tokenizer_config.json
#               (carry that one file: the tokenizer directory is 11 MB)
#   bench       (only with --bench) tests/gpu/bench.sh: make-random checkpoints + cinfer bench
# The last lines are a summary table: step, result, PASS / FAIL counts, seconds, log file.
# Exit status 0 when no step failed. The limits add up to under 10 minutes (one device call);
# a normal run takes a few. --bench adds up to 7 more: better a second call of bench.sh.
# Usage: bash tests/gpu/run.sh [--bench] [--quick]   (--quick: test_cuda_ops --quick too)
# GPU_STEPS="serve-qh serve-paged ..." runs only the steps named (the others are listed as skipped):
# the whole suite takes ~6 min, so a device call that also makes checkpoints or benches may want
# part of it (2026-12-05: two calls ran out of time before the serve steps).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/logs"
bench=0; quick=""
for a in "$@"; do
  case "$a" in
    --bench) bench=1 ;;
    --quick) quick=--quick ;;
    *) echo "usage: $0 [--bench] [--quick]" >&2; exit 2 ;;
  esac
done
[ -x .gpu/cinfer ] || [ ! -f .gpuz/gpu.tar.xz ] || tar xJf .gpuz/gpu.tar.xz   # the packed stage (stage.sh)
[ -x .gpu/cinfer ] || { echo "run.sh: .gpu/cinfer missing: run tests/gpu/stage.sh on the build machine and carry .gpu" >&2; exit 2; }
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CINFER_CUDA_UNVERIFIED=1   # the GPU suite is what verifies the families marked so (registry.h)
export CINFER=$PWD/.gpu/cinfer
SAN=$(command -v compute-sanitizer || true)
for s in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$SAN" ] && [ -x "$s" ] && SAN=$s
done

rows=()
step() { # NAME LIMIT_SECONDS LOG CMD...: runs CMD with a time limit, output to $OUT/logs/LOG
  local name=$1 limit=$2 log=$OUT/logs/$3; shift 3
  if [ -n "${GPU_STEPS:-}" ] && [[ " $GPU_STEPS " != *" $name "* ]]; then
    rows+=("$(printf '%-10s %-14s %6s %6s %6s  %s' "$name" "SKIP(GPU_STEPS)" - - 0 -)")
    return 0
  fi
  local t0=$SECONDS rc
  echo "== $name: $*" | tee "$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1; rc=$?
  local p f res
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then res="TIMEOUT(${limit}s)"
  elif [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then res="FAIL(rc=$rc)"
  elif [ "$p" -eq 0 ] && grep -q '^SKIP ' "$log"; then res=SKIP
  else res=ok; fi
  grep -E '^(FAIL|SKIP) ' "$log" | head -20
  rows+=("$(printf '%-10s %-14s %6s %6s %6s  %s' "$name" "$res" "$p" "$f" $((SECONDS - t0)) "$log")")
}

# ---- device ----
{
  echo "date      $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  echo "glibc     $(ldd --version 2>&1 | head -1)"
  echo "sanitizer ${SAN:-not found}"
  cat .gpu/MANIFEST
  echo "--- ldd .gpu/cinfer .gpu/libcinfer_cuda.so (missing libraries show as 'not found')"
  ldd .gpu/cinfer .gpu/libcinfer_cuda.so 2>&1 | grep -E 'not found|cublas|=> .*\.gpu/' 
} >"$OUT/logs/device.log" 2>&1
head -4 "$OUT/logs/device.log"
if ldd .gpu/cinfer .gpu/libcinfer_cuda.so 2>&1 | grep -q 'not found'; then
  echo "run.sh: missing shared libraries:"; ldd .gpu/cinfer .gpu/libcinfer_cuda.so 2>&1 | grep 'not found'
fi

# ---- ops ----
step ops 150 ops.log .gpu/tests/test_cuda_ops $quick
[ -f "$OUT/logs/ops.log" ] && grep '^# ' "$OUT/logs/ops.log" | tail -1

# ---- ops-alt: every op again with each CUDA switch (cuda_internal.h) away from its default:
# the kernels a default does not take stay checked (--quick: a second full pass would not fit) ----
step ops-alt 120 ops_alt.log env CINFER_CUDA_PDL=0 CINFER_CUDA_NORM_FUSE=0 CINFER_CUDA_FP8_ROWS2=0 \
  CINFER_CUDA_MLA_DECODE=0 CINFER_CUDA_MLA_COMB=0 CINFER_CUDA_MLA_CSLICE=0 CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MOE_PIPE=0 CINFER_CUDA_MOE_SPLIT=0 CINFER_CUDA_DSA_SELECT=0 \
  CINFER_CUDA_DSA_SCORE=0 CINFER_CUDA_Q_AFFINE_LOOP=0 CINFER_CUDA_Q_PAIR=1 CINFER_CUDA_Q_FP_LOOP=1 CINFER_CUDA_ATTN_DECODE2=0 \
  CINFER_CUDA_QMV=0 CINFER_CUDA_Q_GEMM=0 CINFER_CUDA_FP8_GEMM=0 CINFER_CUDA_QMMA=0 CINFER_CUDA_FLASH2=0 CINFER_CUDA_SSD_CHUNK=0 \
  CINFER_CUDA_DN_CHUNK=0 CINFER_CUDA_HCMIX=0 CINFER_CUDA_V4_SPLIT=0 CINFER_CUDA_GEMM_STREAMS=0 CINFER_CUDA_MOE_FUSE=0 .gpu/tests/test_cuda_ops --quick

# ---- ops-mla: MLA attention on tensor cores at every context (the default's decode rows take it
# from 1024 keys), and the CUDA-core decode kernel where the default gives its rows to the
# tensor cores (ops-alt turns both off); the combine's column
# blocks against whole rows (the test's COMB=0 backend) where the sliced combine is off ----
step ops-mla 90 ops_mla.log bash -c "
  for sw in CINFER_CUDA_MLA_TC_MIN=0 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_DECODE=1' \
            'CINFER_CUDA_MLA_TC_MIN=0 CINFER_CUDA_MLA_TC_RUN=3 CINFER_CUDA_MLA_CSLICE=0'; do
    env \$sw .gpu/tests/test_cuda_ops --quick --only _attend || exit 1
  done"

# ---- ops-flash: the prefill attention's other forms (the defaults take attn_flash.cu's kernel in
# key segments, tile 32, ldmatrix tiles, a block per kv group, 128 query rows a block when they fill
# it; ops-alt turns it off altogether for the WMMA one, so these need their own run) ----
step ops-flash 150 ops_flash.log bash -c "
  for sw in 'CINFER_CUDA_FLASH_SPLIT=0 CINFER_CUDA_FLASH_BK=16 CINFER_CUDA_FLASH_GQA=0' 'CINFER_CUDA_FLASH_LDM=0' \
            'CINFER_CUDA_FLASH_BQ=64' 'CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_SEGMIN=64 CINFER_CUDA_FLASH_LDM=0' \
            'CINFER_CUDA_FLASH_H16=3' 'CINFER_CUDA_FLASH_H16=4 CINFER_CUDA_FLASH_SPLIT=0' 'CINFER_CUDA_ROPE_FUSE=0'; do
    for o in 'cuda attention' 'cuda rope_attend'; do env \$sw .gpu/tests/test_cuda_ops --quick --only \"\$o\" || exit 1; done
  done"

# ---- batch: a batched decode step (per-row caches, graph replay) = each row alone ----
step batch 120 batch.log env CINFER_TEST_DEVICE=cuda .gpu/tests/test_batch_argmax
step paged 60 paged.log env CINFER_TEST_DEVICE=cuda .gpu/tests/test_paged
step snapshot 60 snapshot.log env CINFER_TEST_DEVICE=cuda CINFER_CUDA_UNVERIFIED=1 .gpu/tests/test_snapshot

# ---- parity ----
step parity 240 parity.log bash tests/gpu/parity.sh   # 240: the 13 mlx_* fixtures run too (quant.cu)

# ---- memcheck ----
if [ -n "$SAN" ]; then
  step memcheck-ops 150 memcheck_ops.log "$SAN" --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 20 \
    .gpu/tests/test_cuda_ops --quick
  fx=tests/fixtures/qwen3_bf16
  toks=$(tr -d ' \n' <$fx/ref.json | grep -o '"tokens":\[[0-9,]*\]' | sed 's/.*\[\(.*\)\]/\1/')
  step memcheck-cli 150 memcheck_cli.log bash -c "
    '$SAN' --tool memcheck --error-exitcode 99 --print-limit 20 '$CINFER' logits --model $fx --tokens $toks \
      --out '$OUT/logs/memcheck_step.f32' --step --device cuda &&
    '$SAN' --tool memcheck --error-exitcode 99 --print-limit 20 '$CINFER' generate --model $fx \
      --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12 --max-tokens 8 --ids --device cuda &&
    for f in deepseek_v32 deepseek_v4 lfm2_moe nemotron_h qwen3_5 qwen3_next mlx_deepseek_v3_4bit; do
      '$SAN' --tool memcheck --error-exitcode 99 --print-limit 20 '$CINFER' logits --model tests/fixtures/\$f \
        --tokens 1,5,9,22,7,3,11,40 --out /tmp/memcheck_\$f.f32 --step --device cuda || exit 99
    done"
else
  rows+=("$(printf '%-10s %-14s %6s %6s %6s  %s' memcheck "SKIP(no compute-sanitizer)" - - 0 -)")
fi

# ---- generate ----
step generate 45 generate.log "$CINFER" generate --model tests/fixtures/qwen3_bf16 \
  --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 32 --ids --device cuda --stats

# ---- serve: the paged pool behind the HTTP server on the device (a dense fixture, and
# DeepSeek V3.2's: latent rows and indexer keys in the pool; two hybrids: attention rows in
# the pool, DeltaNet / Mamba2 states from snapshots; DeepSeek V4: compressed entries in the
# pool, window rings and pending tokens from snapshots) ----
port=18090
for sf in qwen3_tied:serve deepseek_v32:serve-dsa qwen3_5:serve-qh nemotron_h:serve-nh deepseek_v4_hub:serve-v4; do
  sdir=$(mktemp -d)
  cp -r tests/fixtures/${sf%%:*} "$sdir/m" && cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$sdir/m/"
  step ${sf##*:} 120 ${sf##*:}.log bash -c "
    '$CINFER' serve --model '$sdir/m' --device cuda --port $port --parallel 8 --ctx 1024 --kv-blocks 16 2>'$OUT/logs/${sf##*:}_server.log' &
    pid=\$!
    for i in \$(seq 1 100); do grep -q 'serving' '$OUT/logs/${sf##*:}_server.log' && break; kill -0 \$pid || break; sleep 0.2; done
    python3 bench/serve_load.py check http://127.0.0.1:$port --vocab 300 --max 400 --n 8 --soak 20; r=\$?
    kill \$pid; wait \$pid; cat '$OUT/logs/${sf##*:}_server.log'; exit \$r"
  rm -rf "$sdir"
  port=$((port + 1))
done
# tests/cli/serve_paged.sh on the device: a 6-block pool under 4 growing requests (preemption), 400,
# equal-to-alone greedy ids, an idle pool, a cached second turn
step serve-paged 120 serve_paged.log env CINFER="$CINFER" SERVE_DEVICE=cuda bash tests/cli/serve_paged.sh
step serve-e2e 150 serve_e2e.log env CINFER="$CINFER" SERVE_DEVICE=cuda bash tests/cli/server.sh

# ---- bench ----
if [ $bench -eq 1 ]; then
  step bench 420 bench.log bash tests/gpu/bench.sh
  grep '^BENCH ' "$OUT/logs/bench.log"
fi

echo
echo "GPU suite $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi -L 2>/dev/null | head -1 | cut -d'(' -f1)"
printf '%-10s %-14s %6s %6s %6s  %s\n' step result PASS FAIL sec log
printf '%s\n' "${rows[@]}" | tee "$OUT/summary.txt"
grep -h '^FAIL ' "$OUT"/logs/*.log >>"$OUT/summary.txt" 2>/dev/null
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
! printf '%s\n' "${rows[@]}" | grep -qE ' (FAIL|TIMEOUT)'
