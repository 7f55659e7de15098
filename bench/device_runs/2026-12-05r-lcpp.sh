#!/bin/bash
# 2026-12-05 (thirty-third session), call 2 of 3 (the machine of call q, warm: its .gpu/ and
# /tmp/cb stay): llama-server (CUDA, sm_90) built from the carried source pack (.lcsrc, made here
# from unslothai/llama.cpp d32676d77 with tools/server, tools/ui's CMake and embed.cpp,
# tools/mtmd, scripts/ui-assets.cmake), then the GGUF bf16 twin of the Qwen3-30B-A3B-dims checkpoint.
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
O=${OUT:-/tmp/out}; mkdir -p "$O"
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start; ls /tmp/cb; ls .gpu | head -3
timeout 480 bash bench/build_llamacpp_device.sh > $O/lcpp-build.log 2>&1; ts "build rc $?"; tail -3 $O/lcpp-build.log
m=/tmp/cb/qwen3-30b-a3b-12l
[ -d $m ] && [ -x .lcpp/bin/llama-server ] && timeout $((580 - SECONDS)) python3 bench/make_bf16_gguf.py $m $m.gguf.part .lcpp > $O/gguf.log 2>&1 &&
  mv $m.gguf.part $m.gguf; ts "gguf rc $?"; tail -2 $O/gguf.log; ls -la /tmp/cb
ts end
