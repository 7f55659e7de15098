#!/bin/bash
# Prepared 2026-12-06 (forty-sixth session) for the next device time, not yet run: moe_fused's phases
# with the routing split in three (route.cuh's ROUTE_MARK slots: scores, ranks, weights; the expert
# table after them), so the next change to route_row aims at the part that costs (4.9 us a block in
# all, bench/RESULTS.md forty-sixth session); then the moe / route ops, the MoE fixtures' step logits
# and the decode, as a baseline for that change.
# Staging on the development VM (the tree is ~58 MB of the 64 MiB a call carries, so only these go):
#   make gpu-stage && make gpu-stage-prof
#   rm -rf .gpup && mkdir -p .gpup/p && cp -r .gpu/lib .gpu/cinfer .gpu/libcinfer_cuda.so .gpu/MANIFEST .gpup/p/
#   cp .gpu/tests/test_cuda_ops .gpup/p/ && strip --strip-unneeded .gpup/p/test_cuda_ops
#   xz -dc .gpuz/prof.so.xz > .gpup/p/libprof.so && (cd .gpup && XZ_OPT=-9e tar cJf p.tar.xz p && rm -rf p)
#   (.gpup in .git/info/exclude); run with carry [".gpup"], kind nvidia-h100-x1.
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
for f in " experts bf16" "moe_route" "moe_experts"; do
  timeout 150 /tmp/p/test_cuda_ops --only "$f" > $O/ops.log 2>&1
  echo "ops '$f' rc=$?: $(grep passed $O/ops.log | tail -1)"; grep ^FAIL $O/ops.log | head -3
done
ts ops
# a bare `wait` would also wait for the tee above (bash >= 5.1) and never return
wait %1 2>/dev/null
CINFER_CUDA_PROF_OUT=/tmp/p.prof timeout -k 5 60 /tmp/pp/cinfer bench --model $M --device cuda --prompt-len 512 --gen 16 > $O/prof.log 2>&1
echo "prof build: $(grep -E '^decode' $O/prof.log | sed 's/  */ /g' | cut -c1-80)"
python3 bench/prof_phases.py /tmp/p.prof | grep "moe fused" | cut -c1-700
for r in 1 2; do for e in CINFER_CUDA_MOE_FUSE=1 CINFER_CUDA_MOE_FUSE=0; do
  echo "round $r $e: $(env $e timeout -k 5 30 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-80 | head -1)"
done; done
ts end
