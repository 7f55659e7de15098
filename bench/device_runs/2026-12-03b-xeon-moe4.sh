#!/usr/bin/env bash
# Twelfth session (2026-12-03, issue #15): the MLX 4-bit Qwen3-30B-A3B-dims pair (4 layers) on the
# GPU box's Xeon, cinfer's CPU build against llama.cpp CPU on the Q4_0 twin, one device call from
# the repository root with carry [".cpux"], where .cpux/ (ignored, never committed) holds
# bundle.tar.xz (cinfer = build-cpu/cinfer of this session, cinfer-before = the session's start
# c880844, and under lib/ the libraries ldd lists that a base system may lack) and lcp-src.tar.xz
# (llama.cpp d32676d77 source, CPU only: CMakeLists.txt, cmake, ggml without the other backends,
# src, include, common, vendor, tools/llama-bench with a tools/CMakeLists.txt naming only it,
# gguf-py). llama-bench is built here (GGML_NATIVE) while the random weights and the pair are
# made; then bench/run_llamacpp_moe.sh alternates cinfer-before, cinfer, cinfer --int16-act and
# llama-bench at 16, 4 and 1 threads.
set -u
mkdir -p /tmp/x /tmp/lcs
tar xJf .cpux/bundle.tar.xz -C /tmp/x && tar xJf .cpux/lcp-src.tar.xz -C /tmp/lcs || exit 1
export LD_LIBRARY_PATH=/tmp/x/lib
C=/tmp/x/cinfer
{ lscpu; date -u; } > "$OUT/machine.txt"
grep -m1 "Model name" "$OUT/machine.txt"; grep -o "avx512_vnni\|avx512_bf16\|amx_int8" "$OUT/machine.txt" | sort -u | tr '\n' ' '; echo
( cmake -S /tmp/lcs -B /tmp/lcs/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF &&
  cmake --build /tmp/lcs/build -j16 --target llama-bench ) > "$OUT/lbuild.log" 2>&1 &
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/a3b4 --dtype bf16 --seed 1 --layers 4 > "$OUT/make.log" 2>&1
MAKE_Q4_JOBS=16 python3 bench/make_q4_pair.py /tmp/a3b4 4 /tmp/a3b4-q4 /tmp/lcs >> "$OUT/make.log" 2>&1 || { tail -5 "$OUT/make.log"; exit 1; }
wait
tail -2 "$OUT/lbuild.log"
SRC=/tmp/a3b4 Q4=/tmp/a3b4-q4 WHICH=q4 ROUNDS=${ROUNDS:-1} THREADS=${THREADS:-"16 4 1"} BEFORE=/tmp/x/cinfer-before \
  ALT=--int16-act CINFER=$C LCPP=/tmp/lcs PY=python3 bash bench/run_llamacpp_moe.sh 2>&1 | tee "$OUT/moe.log" |
  grep -E "^==|prefill |decode  |pp128|tg32"
