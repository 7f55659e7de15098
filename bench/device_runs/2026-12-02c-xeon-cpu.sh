#!/usr/bin/env bash
# Eighth session (2026-12-02, issue #15): cinfer's CPU build against llama.cpp CPU on the GPU box's
# Xeon, one device call: run from the repository root with carry [".cpux"], where .cpux/ (ignored,
# never committed) holds bundle.tar.xz (build-cpu/cinfer and the libraries ldd lists that a base
# system may lack, under lib/) and lcp-src.tar.xz (llama.cpp d32676d77 source: CMakeLists.txt,
# cmake, ggml (CPU only), src, include, common, vendor, tools/llama-bench, gguf-py).
# llama-bench is built here (GGML_NATIVE) while the random Qwen3-0.6B-dims bf16 weights are made,
# then bench/run_llamacpp_dense.sh alternates cinfer, cinfer --bf16-act and llama-bench.
set -u
mkdir -p /tmp/x /tmp/lcs
tar xJf .cpux/bundle.tar.xz -C /tmp/x && tar xJf .cpux/lcp-src.tar.xz -C /tmp/lcs || exit 1
export LD_LIBRARY_PATH=/tmp/x/lib
C=/tmp/x/cinfer
{ lscpu; date -u; } > "$OUT/machine.txt"
( cmake -S /tmp/lcs -B /tmp/lcs/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF &&
  cmake --build /tmp/lcs/build -j16 --target llama-bench ) > "$OUT/lbuild.log" 2>&1 &
$C make-random --config bench/qwen3-0.6b.config.json --out /tmp/q06 --dtype bf16 --seed 1 > "$OUT/make.log" 2>&1
wait
tail -2 "$OUT/lbuild.log"
python3 bench/make_bf16_gguf.py /tmp/q06 /tmp/q06.gguf /tmp/lcs >> "$OUT/make.log" 2>&1 || { tail -5 "$OUT/make.log"; exit 1; }
ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-"16 4 1"} ALT=--bf16-act CINFER=$C LCPP=/tmp/lcs PY=python3 \
  bash bench/run_llamacpp_dense.sh 2>&1 | tee "$OUT/dense.log"
