#!/bin/bash
# (bench/RESULTS.md, ninth session, 2026-12-02: one device call from the repository root with .gpuz
# carried.) The grouped GEMM decoding MLX codes in its B loader (CINFER_CUDA_Q_GEMM=1) against
# widening each layer to f16 first (=0): op tests both ways, logits byte for byte both ways on the
# quantized MoE fixtures, memcheck, parity, then mlx4 Qwen3-30B-A3B dims prefill alternating.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
ts start
for v in 1 0; do
  CINFER_CUDA_Q_GEMM=$v timeout 60 $T --only "moe_experts q" > /tmp/o.log 2>&1; ts "ops 'moe_experts q' Q_GEMM=$v: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
done
toks=$(seq -s, 1 40)
for f in mlx_qwen3_moe_4bit mlx_qwen3_5_moe_4bit mlx_deepseek_v3_4bit mlx_deepseek_v4_4bit mlx_lfm2_moe_6bit; do
  for v in 1 0; do CINFER_CUDA_Q_GEMM=$v timeout 30 $C logits --model tests/fixtures/$f --tokens $toks --out /tmp/l$v.f32 --device cuda 2>/tmp/e$v.log || echo "logits $f Q_GEMM=$v failed: $(tail -1 /tmp/e$v.log)"; done
  ts "$f: Q_GEMM 1 vs 0: $(cmp -s /tmp/l1.f32 /tmp/l0.f32 && echo identical || echo DIFFER) ($(stat -c %s /tmp/l1.f32) bytes)"
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 60 $SAN --tool memcheck --error-exitcode 3 $T --quick --only "moe_experts q" > /tmp/m.log 2>&1; ts "memcheck 'moe_experts q' rc $?: $(grep -E 'ERROR SUMMARY|passed' /tmp/m.log | tr '\n' ' ')"
PARITY_ONLY='^mlx_.*moe|^mlx_deepseek' CINFER=$PWD/$C timeout 60 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; ts "parity mlx MoE: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -5
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && ts made
MAKE_Q4_JOBS=16 timeout 100 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; ts "$(tail -1 /tmp/mk.log)"
for r in 1 2; do for v in 1 0; do
  ts "mlx4 r$r Q_GEMM=$v: $(CINFER_CUDA_Q_GEMM=$v timeout 60 $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 32 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
ts "mlx4 pp2048 Q_GEMM=1: $(timeout 60 $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 2048 --gen 8 2>&1 | grep -E "^prefill" | sed 's/  */ /g')"
ts end
