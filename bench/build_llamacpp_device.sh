#!/usr/bin/env bash
# build_llamacpp_device.sh — builds llama.cpp's llama-server (CUDA, sm_90) ON the device from a
# source pack, for bench/serve_cuda.sh. Nothing from llama.cpp is committed: the pack is made on
# the development machine from a fetched llama.cpp (unslothai/llama.cpp) with the ggml backends
# other than cpu / cuda and the web UI sources left out (~4 MB xz: a device call carries ~64 MB
# with the tree, so it goes in a call of its own, carried as the ignored .lcsrc/), e.g.
#   tar cJf .lcsrc/lcp-src.tar.xz -C SLIM_TREE .
# and built here with every core (the 2-core development machine needs hours for ggml-cuda).
# Output: .lcpp/bin/llama-server, .lcpp/lib/ (libllama, libggml*), .lcpp/gguf-py (for
# bench/make_bf16_gguf.py). The build tree stays in /tmp/lcb while the machine is warm, so a
# call cut short by its time limit resumes where it stopped.
# Usage: bash bench/build_llamacpp_device.sh [PACK] (default .lcsrc/lcp-src.tar.xz)
set -eu
cd "$(dirname "$0")/.."
PACK=${1:-.lcsrc/lcp-src.tar.xz}
W=/tmp/lcb
if [ ! -f "$W/src/CMakeLists.txt" ]; then
  mkdir -p "$W/src"
  tar xJf "$PACK" -C "$W/src"
fi
[ -f "$W/build/CMakeCache.txt" ] || cmake -S "$W/src" -B "$W/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >"$W/cfg.log" 2>&1 ||
  { tail -20 "$W/cfg.log"; exit 1; }
t0=$SECONDS
cmake --build "$W/build" --target llama-server -j "$(nproc)" >"$W/build.log" 2>&1 || { tail -20 "$W/build.log"; exit 1; }
echo "llama-server built in $((SECONDS - t0)) s"
mkdir -p .lcpp/bin .lcpp/lib
cp "$W/build/bin/llama-server" .lcpp/bin/
cp -P "$W"/build/bin/*.so* .lcpp/lib/ 2>/dev/null || true
rm -rf .lcpp/gguf-py && cp -r "$W/src/gguf-py" .lcpp/
ls -la .lcpp/bin .lcpp/lib | head -20
