#!/usr/bin/env bash
# Issue #15 (2026-12-03, CPU session on an AVX2-only Zen 4 guest): the int16 prefill GEMM's
# AVX-512 VNNI kernel checked and measured on the GPU box's Xeon, one device call from the
# repository root with carry [".cpux"], where .cpux/bundle.tar.xz (ignored, never committed)
# holds new/ (this session's build: cinfer and five test binaries), old/ (898c1b1 with
# mm_i16_item's gemm branch disabled: the int16 tile path as before) and lib/ (ldd's libraries).
# The device copies the main checkout's tree, not a worktree's: this script and the bundle were
# placed in /work/main/.cpux/ (run.sh) and run as `PART=... bash .cpux/run.sh`. Runs: PART=tests
# with new = the one-row AVX-512 kernel (16:13 UTC), again with new = dd0c7c3 (16:42, with
# TESTS="test_determinism test_parity test_quant" and four SHAPES), then PART=model THREADS="16 4"
# (16:45) and its loop inline with new first (16:46).
# PART=tests: the CPU test binaries of new/ (the AVX-512 and AVX-512 VNNI kernels run here) and
# test_quant --bench-gemm, old and new alternating, one thread (CPU time).
# PART=model: the Qwen3-30B-A3B-dims mlx 4-bit model (4 layers, made here), prefill 128 / decode 16
# at 16 and 4 threads, old and new, default path and --int16-act, alternating.
set -u
mkdir -p /tmp/x && tar xJf .cpux/bundle.tar.xz -C /tmp/x || exit 1
export LD_LIBRARY_PATH=/tmp/x/lib
{ lscpu; date -u; } > "$OUT/machine.txt"
grep -m1 "Model name" "$OUT/machine.txt"; grep -o "avx512_vnni\|avx512_bf16\|amx_int8" "$OUT/machine.txt" | sort -u | tr '\n' ' '; echo
case "${PART:-tests}" in
tests)
  for t in ${TESTS:-test_determinism test_quant test_ops test_backend_ops test_parity}; do
    /tmp/x/new/tests/$t > "$OUT/$t.log" 2>&1
    echo "$t rc=$? pass=$(grep -c '^PASS' "$OUT/$t.log") fail=$(grep -c '^FAIL' "$OUT/$t.log")"
    grep '^FAIL' "$OUT/$t.log" | head -5
  done
  grep "int16-act" "$OUT/test_parity.log" | head -20
  date -u
  for r in ${ROUNDS:-1 2}; do for v in old new; do for s in ${SHAPES:-"4096,2048,128" "2048,4096,128" "768,2048,8" "2048,768,8" "768,2048,32"}; do
    s=${s//,/ }
    /tmp/x/$v/tests/test_quant --bench-gemm $s 1 | sed "s/^/$v r$r /"
  done; done; done
  date -u ;;
model)
  /tmp/x/new/cinfer make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/a3b4 --dtype bf16 --seed 1 --layers 4 > "$OUT/make.log" 2>&1
  MAKE_Q4_JOBS=16 python3 bench/make_q4_pair.py /tmp/a3b4 4 /tmp/a3b4-q4 /nonexistent >> "$OUT/make.log" 2>&1
  ls /tmp/a3b4-q4/mlx4 || { tail -5 "$OUT/make.log"; exit 1; }
  date -u
  for thr in ${THREADS:-16 4}; do for r in ${ROUNDS:-1 2}; do for v in old new; do for a in "" --int16-act; do
    echo "threads=$thr r$r $v ${a:-default}: $(/tmp/x/$v/cinfer bench --model /tmp/a3b4-q4/mlx4 --prompt-len 128 --gen 16 --threads $thr $a 2>&1 | grep -E 'prefill|decode ' | tr -s ' ' | tr '\n' ' ')"
  done; done; done; done
  date -u ;;
esac
