# 2026-12-03 (fifteenth session), call 2 of 2 (warm machine after n): Qwen3.5 dims pp4096 with the
# chunked DeltaNet and with CINFER_CUDA_DN_CHUNK=0 (token by token) alternating, then issue #17's
# side by side: tests/gpu/bench.sh BENCH_ONLY=hyb against the llama-bench built on the device by
# call n (/tmp/lcb), same random bf16 weights (GGUF twins by bench/make_bf16_gguf.py).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 64 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
mkdir -p /tmp/cinfer-bench
m=/tmp/cinfer-bench/qwen3.5-35b-a3b-4l
[ -d $m ] || timeout 150 $C make-random --config bench/qwen3.5-35b-a3b.config.json --out $m --dtype bf16 --seed 1 --layers 4 > /dev/null
for r in 1 2; do ts "q35 p4096 DN_CHUNK default: $(b $m 4096)"; ts "q35 p4096 DN_CHUNK=0: $(CINFER_CUDA_DN_CHUNK=0 b $m 4096)"; done
ts "q35 p512 DN_CHUNK default: $(b $m 512)"; ts "q35 p512 DN_CHUNK=0: $(CINFER_CUDA_DN_CHUNK=0 b $m 512)"
[ -x /tmp/lcb/bin/llama-bench ] || { ts "no /tmp/lcb/bin/llama-bench: continuing the build"; bash bench/device_runs/lcpp_build.sh 400; }
ts "hyb start"
LLAMA_BENCH=/tmp/lcb/bin/llama-bench LCPP_PY_DIR=/tmp/lcsrc HYB_REPS=1 HYB_BUDGET=$((560 - SECONDS)) BENCH_ONLY=hyb OUT=$O \
  timeout $((575 - SECONDS)) bash tests/gpu/bench.sh > $O/hyb.log 2>&1
ts "hyb rc $?"; sed -n '/== hyb summary/,$p' $O/hyb.log
ts end
