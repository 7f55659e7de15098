#!/usr/bin/env bash
# stage_llamacpp.sh — packs llama.cpp's llama-bench for the device's side-by-side runs
# (tests/gpu/bench.sh BENCH_ONLY=hyb), run HERE once the llama.cpp CUDA build has finished.
# Nothing from llama.cpp is ever committed: the pack lands in .gpuz/ (git-ignored, carried).
#
#   .lcpp/bin/llama-bench     from $LCPP_BUILD/bin
#   .lcpp/lib/                every library `ldd` lists for it (transitively: libllama,
#                             libllama-common, libllama-bench-impl, libggml*, and libggml-cuda
#                             which libggml loads) that a base system may lack; not libc, libm,
#                             libpthread, libdl, librt, ld-linux, libgcc_s, nor libcuda /
#                             libcudart / libcublas*, which the device has (driver, CUDA 13 in
#                             /usr/local/cuda/lib64), nor libnccl (ggml-cuda links it when the
#                             build machine has it; 190 MB: bench.sh takes PyTorch's on the device)
#   .lcpp/gguf-py/gguf/       llama.cpp's gguf-py (for bench/make_bf16_gguf.py on the device)
#   .lcpp/MANIFEST            llama.cpp commit, build options, files and sizes
# packed as .gpuz/lcpp.tar.xz. On the device: tar xJf .gpuz/lcpp.tar.xz (bench.sh does it).
# Usage: bench/stage_llamacpp.sh [LCPP_BUILD]   (default /tmp/llama.cpp/build-cuda; LCPP_SRC,
# default the build's parent, gives gguf-py; OUT_TAR overrides .gpuz/lcpp.tar.xz for dry runs)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-/tmp/llama.cpp/build-cuda}
SRC=${LCPP_SRC:-$(dirname "$B")}
TAR=${OUT_TAR:-.gpuz/lcpp.tar.xz}
# A device call carries ~64,000,000 bytes with the tree: the tracked files (56.0 MB on
# 2026-12-02: the fixtures) and .gpuz/gpu.tar.xz (~7.2 MB) leave nothing, so by default the pack
# must fit what is left; llama.cpp d32676d77's libggml-cuda alone is 58 MB (42.9 MB packed),
# which does not. What worked (bench/RESULTS.md, #17 side by side): parts of 7.2 MB
# (`dd bs=7200000 skip=i count=1`) in ignored dirs .lcp1 .. .lcp6, one carried per call on a
# warm machine, each call first copying its part to /tmp on the device (a carried path is gone
# in the next call that does not carry it), the last call assembling .gpuz/lcpp.tar.xz.
tree=$(git ls-files -z 2>/dev/null | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print int(s / 1048576) }')
gz=$(stat -c %s .gpuz/gpu.tar.xz 2>/dev/null || echo 0)
LIMIT_MIB=${LIMIT_MIB:-$((64 - ${tree:-0} - gz / 1048576 - 1))}
[ -x "$B/bin/llama-bench" ] || { echo "stage_llamacpp: $B/bin/llama-bench missing (build not finished?)" >&2; exit 1; }
[ -f "$SRC/gguf-py/gguf/gguf_writer.py" ] || { echo "stage_llamacpp: no gguf-py in $SRC" >&2; exit 1; }
cuda=0; ls "$B"/bin/libggml-cuda.so* >/dev/null 2>&1 && cuda=1
[ $cuda = 1 ] || echo "stage_llamacpp: note: $B has no libggml-cuda.so (a CPU build: dry run only)" >&2
rm -rf .lcpp
mkdir -p .lcpp/bin .lcpp/lib .lcpp/gguf-py
cp "$B/bin/llama-bench" .lcpp/bin/
# ldd resolves the whole tree (libggml.so links libggml-cuda.so when backends are not dynamic)
ldd "$B/bin/llama-bench" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|linux-vdso*) continue ;;
    libcublas*|libcudart*|libcuda.so*|libnvidia*) continue ;;   # the device's driver / CUDA 13
    libnccl*) continue ;;   # 190 MB; the device's PyTorch ships one (bench.sh puts it on the path)
  esac
  cp -L "$path" ".lcpp/lib/$name"
done
if [ $cuda = 1 ] && ! ls .lcpp/lib/libggml-cuda.so* >/dev/null 2>&1; then
  # loaded, not linked: one copy, under the soname the loader asks for
  if [ -e "$B/bin/libggml-cuda.so.0" ]; then cp -L "$B/bin/libggml-cuda.so.0" .lcpp/lib/
  else cp -L "$B/bin/libggml-cuda.so" .lcpp/lib/; fi
fi
strip --strip-unneeded .lcpp/bin/llama-bench .lcpp/lib/* 2>/dev/null || true
cp -r "$SRC/gguf-py/gguf" .lcpp/gguf-py/
rm -rf .lcpp/gguf-py/gguf/__pycache__ .lcpp/gguf-py/gguf/scripts
{
  echo "llama.cpp $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?') ($(git -C "$SRC" log -1 --format=%cd --date=short 2>/dev/null || echo '?'))"
  echo "build $B: $(grep -E '^(CMAKE_CUDA_ARCHITECTURES|GGML_CUDA_COMPRESSION_MODE|GGML_NATIVE|CMAKE_BUILD_TYPE)[:=]' "$B/CMakeCache.txt" 2>/dev/null | tr '\n' ' ')"
  echo "staged $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n); needs glibc >= $(objdump -T .lcpp/bin/* .lcpp/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2)"
  (cd .lcpp && find . -type f ! -name MANIFEST ! -path './gguf-py/*' -printf '%s %p\n' | sort -k2)
} >.lcpp/MANIFEST
mkdir -p "$(dirname "$TAR")"
XZ_OPT=-9 tar cJf "$TAR" .lcpp
sz=$(stat -c %s "$TAR")
echo "packed $TAR: $((sz / 1024)) KiB ($(du -sm .lcpp | cut -f1) MiB unpacked, $(ls .lcpp/lib | wc -l) libraries)"
cat .lcpp/MANIFEST
rm -rf .lcpp
if [ "$sz" -gt $((LIMIT_MIB * 1024 * 1024)) ]; then
  echo "stage_llamacpp: $TAR ($((sz / 1048576)) MiB) is over the $LIMIT_MIB MiB a device call can carry beside the tree (${tree:-?} MiB) and gpu.tar.xz: send it in parts over calls on a warm machine (this file's header says how)" >&2
  exit 1
fi
