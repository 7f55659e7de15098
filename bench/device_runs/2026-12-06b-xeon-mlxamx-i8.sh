#!/usr/bin/env bash
# 2026-12-06 (thirty-sixth session, issue #15), second call: the x preparation across the pool; --mlx-amx in its int16 form (MLX 4-bit weights on
# AMX-INT8 tiles for prompts, AVX-512 VNNI for decode; src/backend/cpu/amx_mlx.c) on the GPU box's
# Xeon against llama.cpp CPU (its own AMX Q4_0 kernels where GGML_NATIVE enables them), one device
# call from the repository root with carry [".cpux"]: .cpux/ (ignored, never committed) holds
# bundle.tar.xz (build/cinfer of this session and under lib/ the libraries ldd lists that a base
# system may lack) and lcp-src.tar.xz (llama.cpp d32676d77 source, CPU only, as in
# 2026-12-05w-xeon-mlxamx.sh). llama-bench is built here while the random weights and the pairs are
# made: the Qwen3-30B-A3B-dims 4-layer 4-bit pair (bench/run_llamacpp_moe.sh, prompts 512 and 128)
# and the Qwen3-0.6B-dims 4-bit pair (bench/run_llamacpp_dense.sh: prefill 128, decode 64); cinfer,
# cinfer --mlx-amx and llama-bench alternate at 16, 4 and 1 threads.
set -u
mkdir -p /tmp/x /tmp/lcs
tar xJf .cpux/bundle.tar.xz -C /tmp/x && tar xJf .cpux/lcp-src.tar.xz -C /tmp/lcs || exit 1
export LD_LIBRARY_PATH=/tmp/x/lib
C=/tmp/x/cinfer
{ lscpu; date -u; } > "$OUT/machine.txt"
grep -m1 "Model name" "$OUT/machine.txt"; grep -o "avx512_vnni\|avx512_bf16\|amx_int8\|amx_bf16\|amx_tile" "$OUT/machine.txt" | sort -u | tr '\n' ' '; echo
( cmake -S /tmp/lcs -B /tmp/lcs/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF &&
  cmake --build /tmp/lcs/build -j16 --target llama-bench ) > "$OUT/lbuild.log" 2>&1 &
date -u +%T
{ [ -d /tmp/a3b4 ] || $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/a3b4 --dtype bf16 --seed 1 --layers 4
  [ -d /tmp/q06 ] || $C make-random --config bench/qwen3-0.6b.config.json --out /tmp/q06 --dtype bf16 --seed 1; } > "$OUT/make.log" 2>&1
[ -f /tmp/a3b4-q4/q4_0.gguf ] || MAKE_Q4_JOBS=16 python3 bench/make_q4_pair.py /tmp/a3b4 4 /tmp/a3b4-q4 /tmp/lcs >> "$OUT/make.log" 2>&1 || { tail -5 "$OUT/make.log"; exit 1; }
[ -f /tmp/q06-q4/q4_0.gguf ] || MAKE_Q4_JOBS=16 python3 bench/make_q4_pair.py /tmp/q06 28 /tmp/q06-q4 /tmp/lcs >> "$OUT/make.log" 2>&1 || { tail -5 "$OUT/make.log"; exit 1; }
wait
date -u +%T; tail -2 "$OUT/lbuild.log"
$C bench --model /tmp/a3b4-q4/mlx4 --prompt-len 20 --gen 2 --mlx-amx 2>&1 | grep -o 'backend [a-z0-9-]*'
for P in 512 128; do
  SRC=/tmp/a3b4 Q4=/tmp/a3b4-q4 WHICH=q4 ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-"16 4"} PROMPT=$P GEN=32 \
    ALT=--mlx-amx CINFER=$C LCPP=/tmp/lcs LCPP_BIN=/tmp/lcs/build/bin PY=python3 bash bench/run_llamacpp_moe.sh 2>&1 | tee "$OUT/moe-$P.log" |
    grep -E "^==|^prefill |^decode  |pp$P|tg32"
done
SRC=/tmp/q06-q4/mlx4 GGUF=/tmp/q06-q4/q4_0.gguf ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-"16 4"} ALT=--mlx-amx CINFER=$C \
  LCPP=/tmp/lcs LCPP_BIN=/tmp/lcs/build/bin PY=python3 bash bench/run_llamacpp_dense.sh 2>&1 | tee "$OUT/dense.log" |
  grep -E "^==|^prefill |^decode  |pp128|tg64"
date -u +%T
