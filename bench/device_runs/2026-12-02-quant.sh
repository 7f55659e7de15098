#!/bin/bash
# (bench/RESULTS.md, sixth session, 2026-12-02: this is the command of one device call; run it from the
# repository root on the device with .gpuz carried (tests/gpu/stage.sh), as the lines below do)
# final call: quantized GEMV forms: ops + mlx4 decode A/B. Run then with CINFER_CUDA_Q_LEGACY=1|0,
# since renamed CINFER_CUDA_Q_AFFINE_LOOP=1|0 (1 the default now); the names below are the new ones.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops
for o in "cuda q" "moe_experts q" "quantized" "mla_absorb_q+out_heads q"; do
  timeout 60 $T --only "$o" > /tmp/o.log 2>&1; echo "ops '$o': $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
done
CINFER_CUDA_Q_PAIR=0 timeout 60 $T --only "cuda q" > /tmp/o.log 2>&1; echo "ops 'cuda q' Q_PAIR=0: $(tail -1 /tmp/o.log)"; grep "^FAIL" /tmp/o.log | head -3
CINFER_CUDA_Q_AFFINE_LOOP=0 timeout 60 $T --only "moe_experts q" > /tmp/o.log 2>&1; echo "ops 'moe_experts q' Q_AFFINE_LOOP=0: $(tail -1 /tmp/o.log)"
PARITY_ONLY='^mlx_(qwen3_moe|llama|qwen3_8bit|deepseek_v3)' CINFER=$PWD/.gpu/cinfer timeout 60 bash tests/gpu/parity.sh > /tmp/p.log 2>&1; echo "parity mlx subset: $(grep -c '^PASS' /tmp/p.log) PASS, $(grep -c '^FAIL' /tmp/p.log) FAIL"; grep '^FAIL' /tmp/p.log | head -3
.gpu/cinfer make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && echo made
MAKE_Q4_JOBS=16 timeout 150 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; tail -2 /tmp/mk.log; ls /tmp/q30pair
for r in 1 2; do for s in "1 0" "0 0" "0 1"; do set -- $s
  echo "== mlx4 12l AFFINE_LOOP=$1 PAIR=$2 r$r: $(CINFER_CUDA_Q_AFFINE_LOOP=$1 CINFER_CUDA_Q_PAIR=$2 timeout 60 .gpu/cinfer bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
