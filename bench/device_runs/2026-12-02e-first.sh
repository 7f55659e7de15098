#!/bin/bash
# (bench/RESULTS.md, tenth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) 1) the fp8 B loader check of 2026-12-02d-fp8gemm.sh; 2) decode attention through
# attn_decode2_kernel (CINFER_CUDA_ATTN_DECODE2=1) against the split kernels at long context,
# Qwen3-30B-A3B dims 12 layers bf16; 3) an ncu kernel-time list of that model's decode steps.
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p $O
bash bench/device_runs/2026-12-02d-fp8gemm.sh 2>&1 | tee $O/fp8gemm.log
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
for v in 1 0; do
  CINFER_CUDA_ATTN_DECODE2=$v timeout 60 $T --only "attention" > /tmp/o.log 2>&1; ts "ops 'attention' ATTN_DECODE2=$v: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
done
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made q30
for r in 1 2; do for d in 4096 32768; do for v in 1 0; do
  ts "q30 r$r d$d ATTN_DECODE2=$v: $(CINFER_CUDA_ATTN_DECODE2=$v timeout 90 $C bench --model /tmp/q30 --device cuda --prompt-len 16 --gen 64 --depth $d 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done; done
ts "q30 pp512: $(timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model /tmp/q30 --device cuda --prompt-len 8 --gen 3 > $O/ncu-decode-bf16.txt 2>&1; ts "ncu bf16 rc $?"
ts end
