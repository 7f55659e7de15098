#!/bin/bash
# (bench/RESULTS.md, tenth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) ncu kernel times (one metric) of decode steps of Qwen3-30B-A3B dims, 2 layers, at 512 and
# 4096 tokens of context, with CINFER_CUDA_ATTN_DECODE2 1 and 0.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
O=${OUT:-/tmp/out}; mkdir -p $O
C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30s --dtype bf16 --seed 1 --layers 2 > /dev/null && ts made
for d in 512 4096; do for v in 1 0; do
  CINFER_CUDA_ATTN_DECODE2=$v timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model /tmp/q30s --device cuda --prompt-len 16 --depth $d --gen 3 > $O/ncu-d$d-v$v.txt 2>&1; ts "ncu d$d v$v rc $?"
  grep -A1 -E "^  (attn|qk_rope)" $O/ncu-d$d-v$v.txt | grep -E "attn|qk_rope|gpu__time" | sed 's/(float.*Invocations/ Invocations/; s/  */ /g' | paste - - | cut -c1-200
done; done
ts end
