#!/bin/bash
# (bench/RESULTS.md, tenth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) attn_decode2_kernel rewritten as flash decoding (CINFER_CUDA_ATTN_DECODE2=1) against the
# default split kernels: op tests (both settings, the new one twice bit for bit), memcheck, parity of
# the GQA families with it on, decode at 4k / 32k context on Qwen3-30B-A3B dims (12 layers) and
# LFM2-8B-A1B / Qwen3.5-35B-A3B dims (the hybrids' attention layers).
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
timeout 90 $T --only "attention" > /tmp/o.log 2>&1; ts "ops 'attention': $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -5
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
CINFER_CUDA_ATTN_DECODE2=1 timeout 90 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "attention" > /tmp/m.log 2>&1; ts "memcheck 'attention' rc $?: $(grep -E 'ERROR SUMMARY|passed' /tmp/m.log | tr '\n' ' ')"
CINFER_CUDA_ATTN_DECODE2=1 PARITY_ONLY="${PARITY_ONLY:-^(qwen3|lfm2|nemotron|llama)}" CINFER=$PWD/$C timeout 120 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity ATTN_DECODE2=1: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -5
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made q30
for r in 1 2; do for d in 512 4096 32768; do for v in 1 0; do
  ts "q30 r$r d$d ATTN_DECODE2=$v: $(CINFER_CUDA_ATTN_DECODE2=$v timeout 90 $C bench --model /tmp/q30 --device cuda --prompt-len 16 --gen 64 --depth $d 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done; done
$C make-random --config bench/lfm2-8b-a1b.config.json --out /tmp/lfm --dtype bf16 --seed 1 --layers 8 > /dev/null && ts made lfm2
for r in 1 2; do for d in 1024 32768; do for v in 1 0; do
  ts "lfm2 r$r d$d ATTN_DECODE2=$v: $(CINFER_CUDA_ATTN_DECODE2=$v timeout 90 $C bench --model /tmp/lfm --device cuda --prompt-len 16 --gen 64 --depth $d 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done; done
$C make-random --config bench/qwen3.5-35b-a3b.config.json --out /tmp/q35 --dtype bf16 --seed 1 --layers 4 > /dev/null && ts made q35
for d in 1024 32768; do for v in 1 0; do
  ts "q35 d$d ATTN_DECODE2=$v: $(CINFER_CUDA_ATTN_DECODE2=$v timeout 90 $C bench --model /tmp/q35 --device cuda --prompt-len 16 --gen 64 --depth $d 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
ts end
