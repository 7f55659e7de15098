#!/bin/bash
# 2026-12-06 (forty-sixth session): where moe_fused's time goes, phase by phase (prof.cuh marks in
# moe_fused_kernel, kind 4; libprof.so, the measuring build of the same tree as libcinfer_cuda.so),
# and its gate / up as pipelined half batches (CINFER_CUDA_MF_PIPE=1) against the whole batches:
# the same bits (test_cuda_ops moe_norm_experts: fused = the three ops; logits --step of the MoE
# fixtures cmp), then Qwen3-30B-A3B dims 12 of 48 layers bf16 decode after 512, alternating.
# .gpup/p.tar.xz holds cinfer, its libraries, libcinfer_cuda.so, libprof.so and test_cuda_ops (staged at 77494f7).
# Ran 2026-12-06 23:58 (its checks; then hung at the wait, below); its prof and A/B steps were run by
# hand in two further calls on the same warm machine (RESULTS.md, forty-sixth session).
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/run.log") 2>&1
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/p && tar xJf .gpup/p.tar.xz -C /tmp && head -1 /tmp/p/MANIFEST
mkdir -p /tmp/pp && cp /tmp/p/cinfer /tmp/pp/ && cp /tmp/p/libprof.so /tmp/pp/libcinfer_cuda.so
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64
C=/tmp/p/cinfer M=/tmp/a3b12
( timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 || echo "make-random failed: $(tail -1 $O/make.log)"; ts made ) &
for f in "experts bf16" "experts f16" "experts f32"; do   # the forms moe_fused takes (16-bit / f32 experts)
  CINFER_CUDA_MF_PIPE=1 timeout 100 /tmp/p/test_cuda_ops --only " $f" > $O/ops1.log 2>&1
  echo "pipe=1 ops moe_norm_experts '$f' rc=$?: $(grep passed $O/ops1.log | tail -1)"; grep ^FAIL $O/ops1.log | head -3
done
for fx in qwen3_moe qwen3_moe_norenorm deepseek_v3 lfm2_moe; do
  [ -d tests/fixtures/$fx ] || { echo "no fixture $fx"; continue; }
  for v in 0 1; do CINFER_CUDA_MF_PIPE=$v timeout 30 $C logits --model tests/fixtures/$fx --tokens 1,5,9,22,7,3 --out /tmp/l$v.f32 --step --device cuda > /tmp/l$v.log 2>&1 || echo "logits $fx pipe=$v failed: $(tail -1 /tmp/l$v.log)"; done
  cmp -s /tmp/l0.f32 /tmp/l1.f32 && echo "logits --step $fx: pipe 0 = pipe 1" || echo "logits --step $fx: DIFFER"
done
ts checks
# NB: a bare `wait` here also waits for the `exec > >(tee ...)` process substitution (bash >= 5.1),
# which never ends: this script hung at this line on 2026-12-06 (call 15, 560 s lost); wait for the
# background job alone
wait %1 2>/dev/null
for v in 0 1; do
  CINFER_CUDA_MF_PIPE=$v CINFER_CUDA_PROF_OUT=/tmp/p$v.prof timeout 90 /tmp/pp/cinfer bench --model $M --device cuda --prompt-len 512 --gen 32 > $O/prof$v.log 2>&1
  echo "prof build pipe=$v: $(grep -E '^decode' $O/prof$v.log | sed 's/  */ /g' | cut -c1-80)"
  python3 bench/prof_phases.py /tmp/p$v.prof | grep -A0 "moe fused" | cut -c1-420
done
ts prof
for r in 1 2; do for v in 0 1 x; do
  if [ $v = x ]; then e="CINFER_CUDA_MOE_FUSE=0"; else e="CINFER_CUDA_MF_PIPE=$v"; fi
  echo "round $r $e: $(env $e timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-80)"
done; done
ts end
