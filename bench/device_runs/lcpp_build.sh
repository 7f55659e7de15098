# lcpp_build.sh — builds llama.cpp's llama-bench (CUDA, sm_90) ON the device from the source pack
# of bench/pack_llamacpp_src.sh (.lcsrc/lcsrc.tar.xz, carried), into /tmp/lcb (outside the
# repository: it stays while the machine is warm, so a following call can run
# `LLAMA_BENCH=/tmp/lcb/bin/llama-bench LCPP_PY_DIR=/tmp/lcsrc BENCH_ONLY=hyb bash tests/gpu/bench.sh`).
# Incremental: a second call on a warm machine continues a build cut short by the call's limit.
# Usage (from the repository root): bash bench/device_runs/lcpp_build.sh [SECONDS, default 540]
cd "$(dirname "$0")/../.."
lim=${1:-540} t0=$SECONDS
if [ ! -f /tmp/lcsrc/CMakeLists.txt ]; then mkdir -p /tmp/lcsrc && tar xJf .lcsrc/lcsrc.tar.xz -C /tmp/lcsrc; fi
cat /tmp/lcsrc/PACKED_FROM
[ -f /tmp/lcb/CMakeCache.txt ] || cmake -S /tmp/lcsrc -B /tmp/lcb -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF > /tmp/lcb-configure.log 2>&1 ||
  { tail -20 /tmp/lcb-configure.log; exit 1; }
timeout $((lim - (SECONDS - t0))) cmake --build /tmp/lcb --target llama-bench -j "$(nproc)" > /tmp/lcb-build.log 2>&1; r=$?
echo "lcpp_build: rc $r after $((SECONDS - t0)) s; $(grep -c 'Building CUDA object' /tmp/lcb-build.log) CUDA objects this call"
[ -x /tmp/lcb/bin/llama-bench ] && echo "lcpp_build: /tmp/lcb/bin/llama-bench ready" || tail -5 /tmp/lcb-build.log
