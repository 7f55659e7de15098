#!/usr/bin/env bash
# stage.sh — packs what the GPU machine needs into .gpu/ (git-ignored), run HERE after `make`.
#
# The GPU machine has CUDA 13 but none of the Debian libraries cinfer links (jansson, pcre2,
# utf8proc, microhttpd and what those pull in), and no compiler set up for this tree, so the
# binaries are built here and carried there with their libraries:
#   .gpu/cinfer, .gpu/libcinfer_cuda.so    (the loader finds the library beside the binary)
#   .gpu/tests/test_cuda_ops               (finds it in its parent directory)
#   .gpu/tests/test_batch_argmax           (run with CINFER_TEST_DEVICE=cuda: batch rows on the device)
#   .gpu/tests/test_paged                  (run with CINFER_TEST_DEVICE=cuda: a shared block pool on the device)
#   .gpu/tests/test_snapshot               (run with CINFER_TEST_DEVICE=cuda: hybrid snapshots on the device)
#   .gpu/bench_*                           (device benchmarks, when built)
#   .gpu/lib/                              every library `ldd` lists for these that a base
#                                          system may lack (not libc, libm, libpthread, libdl,
#                                          librt, ld-linux, libgcc_s, nor the CUDA toolkit's own
#                                          libcublas*, which the machine has)
#   .gpu/MANIFEST                          what was staged, from which commit, sizes
# Usage: tests/gpu/stage.sh [BUILD_DIR]   (default build). Then run on the device, from the
# repository root, with .gpu carried: bash tests/gpu/run.sh. STAGE_CUDA_LIB: a
# libcinfer_cuda.so to stage instead of BUILD_DIR's (make gpu-stage: an sm_90-only build).
# STAGE_TESTS=0: cinfer and the libraries only (make gpu-stage-lineinfo: a library with line
# tables packs to ~8 MiB, and with the tests the stage would not fit beside the tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
for f in "$B/cinfer" "$B/libcinfer_cuda.so" "$B/tests/test_cuda_ops" "$B/tests/test_batch_argmax" "$B/tests/test_paged" "$B/tests/test_snapshot"; do
  [ -f "$f" ] || { echo "stage: $f missing (run make first; libcinfer_cuda.so needs nvcc)" >&2; exit 1; }
done
rm -rf .gpu
mkdir -p .gpu/lib .gpu/tests
cp "$B/cinfer" "${STAGE_CUDA_LIB:-$B/libcinfer_cuda.so}" .gpu/
bins=(.gpu/cinfer .gpu/libcinfer_cuda.so)
if [ "${STAGE_TESTS:-1}" != 0 ]; then
  cp "$B/tests/test_cuda_ops" "$B/tests/test_batch_argmax" "$B/tests/test_paged" "$B/tests/test_snapshot" .gpu/tests/
  for b in "$B"/bench_*; do [ -x "$b" ] && cp "$b" .gpu/; done
  bins+=(.gpu/tests/test_cuda_ops .gpu/tests/test_batch_argmax .gpu/tests/test_paged .gpu/tests/test_snapshot)
  for b in .gpu/bench_*; do [ -f "$b" ] && bins+=("$b"); done
fi

# "name => /path (0x...)" lines of ldd; a base system has the ones skipped here.
for b in "${bins[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|linux-vdso*) continue ;;
    libcublas*|libcudart*|libcuda.so*) continue ;;   # from the machine's CUDA 13
  esac
  cp -L "$path" ".gpu/lib/$name"
done

{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps include 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n) from $B"
  echo "needs glibc >= $(objdump -T "${bins[@]}" .gpu/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2)"
  (cd .gpu && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2)
} >.gpu/MANIFEST
total=$(du -sb .gpu | cut -f1)
echo "staged $(find .gpu -type f | wc -l) files, $((total / 1024 / 1024)) MiB in .gpu/ ($(ls .gpu/lib | wc -l) libraries)"
if [ "$total" -gt $((60 * 1024 * 1024)) ]; then echo "stage: .gpu is over 60 MiB" >&2; exit 1; fi
# The device tool carries the tracked tree (~54 MiB with the fixtures) plus what is named,
# 64 MiB in all: the stripped, xz-packed .gpu (~5 MiB) fits where .gpu itself does not.
# Carry .gpuz and start the device command with `tar xJf .gpuz/gpu.tar.xz` (run.sh does it
# when .gpu is missing).
strip --strip-unneeded .gpu/cinfer .gpu/libcinfer_cuda.so .gpu/tests/* .gpu/bench_* 2>/dev/null || true
mkdir -p .gpuz
XZ_OPT=-9e tar cJf .gpuz/gpu.tar.xz.tmp .gpu && mv .gpuz/gpu.tar.xz.tmp .gpuz/gpu.tar.xz   # whole or not at all: a device call may be carrying it
echo "packed .gpuz/gpu.tar.xz: $(( $(stat -c %s .gpuz/gpu.tar.xz) / 1024 )) KiB (carry .gpuz)"
