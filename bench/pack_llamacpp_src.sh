#!/usr/bin/env bash
# pack_llamacpp_src.sh — packs the llama.cpp sources that llama-bench's CUDA build needs, for a
# build ON the device (bench/device_runs/lcpp_build.sh): a device call carries ~64,000,000 bytes
# with the tracked tree (~56.6 MB) and .gpuz/gpu.tar.xz (~5.4 MB), which leaves room for ~1.6 MB,
# not for a built libggml-cuda (58 MB). Run HERE on a fetched llama.cpp (the `fetch` tool's git
# dir); nothing from llama.cpp is committed: the pack lands in .lcsrc/ (git-ignored, carried).
#   kept: CMakeLists.txt cmake/ ggml/ (CPU and CUDA backends only; the CPU's x86 arch code only)
#         src/ include/ common/ vendor/ (without miniaudio, stb) tools/llama-bench gguf-py/gguf
#         licenses/ LICENSE; tools/CMakeLists.txt rewritten to add llama-bench alone
# Usage: bench/pack_llamacpp_src.sh GIT_DIR [REV]   (REV default HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
G=${1:?usage: $0 GIT_DIR [REV]} REV=${2:-HEAD}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git -C "$G" archive "$REV" CMakeLists.txt cmake ggml src include common tools/llama-bench tools/CMakeLists.txt \
  vendor gguf-py/gguf licenses LICENSE | tar x -C "$tmp"
for b in opencl vulkan sycl hexagon et openvino webgpu virtgpu metal zdnn cann musa kompute blas rpc zendnn hip; do
  rm -rf "$tmp/ggml/src/ggml-$b"
done
for a in s390 loongarch powerpc riscv arm wasm; do rm -rf "$tmp/ggml/src/ggml-cpu/arch/$a"; done
rm -rf "$tmp/vendor/miniaudio" "$tmp/vendor/stb"
printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' >"$tmp/tools/CMakeLists.txt"
echo "llama.cpp $(git -C "$G" rev-parse --short "$REV") ($(git -C "$G" log -1 --format=%cd --date=short "$REV"))" >"$tmp/PACKED_FROM"
mkdir -p .lcsrc
tar cJf .lcsrc/lcsrc.tar.xz -C "$tmp" .
echo "pack_llamacpp_src: .lcsrc/lcsrc.tar.xz $(stat -c %s .lcsrc/lcsrc.tar.xz) bytes, $(cat "$tmp/PACKED_FROM")"
