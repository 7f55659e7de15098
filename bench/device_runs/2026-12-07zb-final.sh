#!/bin/bash
# 2026-12-07 (forty-seventh session): the committed form of script za's winner (9ea83ae: route_row's
# ranks by up to 32 threads an expert, the one-atomic grid barrier, no switches): the MoE route /
# fused ops, the MoE fixtures' parity, and the decode beside the three ops (CINFER_CUDA_MOE_FUSE=0).
# Staging as script za's header, without the prof library (make gpu-stage only).
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/run.log") 2>&1
T0=$(date +%s)
ts() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/p && tar xJf .gpup/p.tar.xz -C /tmp && head -1 /tmp/p/MANIFEST
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64
C=/tmp/p/cinfer M=/tmp/a3b12
( timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 || echo "make-random failed: $(tail -1 $O/make.log)"; ts made ) &
timeout 30 /tmp/p/test_cuda_ops --only moe_route > $O/ops0.log 2>&1
echo "ops moe_route rc=$?: $(grep passed $O/ops0.log | tail -1)"; grep ^FAIL $O/ops0.log | head -3
timeout 150 /tmp/p/test_cuda_ops --only moe_norm_experts > $O/ops1.log 2>&1
echo "ops moe_norm_experts rc=$?: $(grep passed $O/ops1.log | tail -1)"; grep ^FAIL $O/ops1.log | head -3
PARITY_ONLY='moe|deepseek_v3$|deepseek_v32$|deepseek_v3_fp8' CINFER=$C timeout 100 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity (MoE fixtures) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts tests
[ "${ZB_QUICK:-0}" = 1 ] && { ts end; exit 0; }   # ZB_QUICK=1: the checks only
wait %1 2>/dev/null   # a bare `wait` would also wait for the tee above (bash >= 5.1) and never return
for r in 1 2; do for e in CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE=0; do
  echo "round $r $e: $(env $e timeout -k 5 40 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-100 | head -2 | tr '\n' ' ')"
done; done
ts end
