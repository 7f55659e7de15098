#!/bin/bash
# (bench/RESULTS.md, ninth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) fp8 experts read by the grouped GEMM's B loader (CINFER_CUDA_FP8_GEMM=1) against widening
# them to f16 per layer (=0): op tests, logits byte for byte, memcheck, DeepSeek V2-Lite dims fp8.
# NOT RUN: the ninth session's device time ran out before this call (written for the next one).
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
for v in 1 0; do
  CINFER_CUDA_FP8_GEMM=$v timeout 60 $T --only "moe_experts" > /tmp/o.log 2>&1; ts "ops 'moe_experts' FP8_GEMM=$v: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
done
toks=$(seq -s, 1 40)
for f in deepseek_v3_fp8 mlx_qwen3_moe_4bit; do
  for v in 1 0; do CINFER_CUDA_FP8_GEMM=$v timeout 30 $C logits --model tests/fixtures/$f --tokens $toks --out /tmp/l$v.f32 --device cuda 2>/tmp/e$v.log || echo "logits $f FP8_GEMM=$v failed: $(tail -1 /tmp/e$v.log)"; done
  ts "$f: FP8_GEMM 1 vs 0: $(cmp -s /tmp/l1.f32 /tmp/l0.f32 && echo identical || echo DIFFER)"
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
CINFER_CUDA_FP8_GEMM=1 timeout 60 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "moe_experts" > /tmp/m.log 2>&1; ts "memcheck 'moe_experts' rc $?: $(grep -E 'ERROR SUMMARY|passed' /tmp/m.log | tr '\n' ' ')"
CINFER_CUDA_FP8_GEMM=1 PARITY_ONLY='fp8' CINFER=$PWD/$C timeout 40 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity fp8: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -3
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/dsq.json
$C make-random --config /tmp/dsq.json --out /tmp/dsfp8 --dtype fp8 --seed 1 --layers 14 > /dev/null && ts "made ds fp8"
for r in 1 2; do for v in 1 0; do
  ts "ds fp8 r$r FP8_GEMM=$v: $(CINFER_CUDA_FP8_GEMM=$v timeout 60 $C bench --model /tmp/dsfp8 --device cuda --prompt-len 512 --gen 16 2>&1 | grep -E "^prefill" | sed 's/  */ /g')"
done; done
ts end
