#!/bin/bash
# 2026-12-07 (forty-seventh session): moe_fused's changes behind switches, measured in one call.
# Run 1 at e017a83 (ROUTE_SPLIT / GBAR_FLIP 0|1); run 2 at 942b5c6 (CINFER_CUDA_ROUTE_RANK=0|1|2, 2: the
# whole routing by warp 0, route_warp) with SCRIPT_RUN=2.
#   CINFER_CUDA_ROUTE_SPLIT (route.cuh): route_row's ranks counted by q threads an expert (q = 4 at
#     128 experts in moe_fused's 512 threads) instead of one thread walking all E;
#   CINFER_CUDA_GBAR_FLIP (moe_fused.cu mf_grid_sync): one atomic a block on a counter whose top bit
#     flips, instead of counter + reset + generation word (two L2 trips fewer on the critical path).
# Both default on. Runs: the bits (test_cuda_ops moe_norm_experts: fused = three ops; moe_route and
# experts ops against the CPU; logits --step of the MoE fixtures cmp-identical with both switches
# off), the phase profile (prof build: route split in scores / ranks / weights) both off and both on,
# then the decode of Qwen3-30B-A3B dims bf16 12 layers, the four combinations alternating, 3 rounds.
# Staging on the development VM (the tree is ~58 MB of the 64 MiB a call carries, so only these go):
#   make gpu-stage && make gpu-stage-prof
#   rm -rf .gpup && mkdir -p .gpup/p && cp -r .gpu/lib .gpu/cinfer .gpu/libcinfer_cuda.so .gpu/MANIFEST .gpup/p/
#   cp .gpu/tests/test_cuda_ops .gpup/p/ && strip --strip-unneeded .gpup/p/test_cuda_ops
#   xz -dc .gpuz/prof.so.xz > .gpup/p/libprof.so && (cd .gpup && XZ_OPT=-9e tar cJf p.tar.xz p && rm -rf p)
#   (.gpup in .git/info/exclude); run with carry [".gpup"], kind nvidia-h100-x1.
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/run.log") 2>&1
T0=$(date +%s)
ts() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
left() { [ $(( $(date +%s) - T0 )) -lt "$1" ]; }   # still before second $1 of the run
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /tmp/p && tar xJf .gpup/p.tar.xz -C /tmp && head -1 /tmp/p/MANIFEST
mkdir -p /tmp/pp && cp /tmp/p/cinfer /tmp/pp/ && cp /tmp/p/libprof.so /tmp/pp/libcinfer_cuda.so
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64
C=/tmp/p/cinfer M=/tmp/a3b12
( timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 || echo "make-random failed: $(tail -1 $O/make.log)"; ts made ) &
timeout 150 /tmp/p/test_cuda_ops --only moe_norm_experts > $O/ops1.log 2>&1
echo "ops moe_norm_experts rc=$?: $(grep passed $O/ops1.log | tail -1)"; grep ^FAIL $O/ops1.log | head -3
if [ "${SCRIPT_RUN:-1}" = 2 ]; then OLD="CINFER_CUDA_ROUTE_RANK=0 CINFER_CUDA_GBAR_FLIP=0"; FXS="qwen3_moe qwen3_moe_norenorm lfm2_moe deepseek_v3 deepseek_v32 deepseek_v3_fp8 mlx_qwen3_moe_4bit mlx_deepseek_v3_4bit deepseek_v4"
else OLD="CINFER_CUDA_ROUTE_SPLIT=0 CINFER_CUDA_GBAR_FLIP=0"; FXS="qwen3_moe qwen3_moe_norenorm lfm2_moe deepseek_v3"; fi
timeout 30 /tmp/p/test_cuda_ops --only moe_route > $O/ops0.log 2>&1
echo "ops moe_route rc=$?: $(grep passed $O/ops0.log | tail -1)"; grep ^FAIL $O/ops0.log | head -3
for fx in $FXS; do
  toks=1,5,9,2,7,3,11,4,8,6,12,10
  $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/new.f32 --step --device cuda 2>/dev/null
  env $OLD $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/old.f32 --step --device cuda 2>/dev/null
  echo "step logits $fx: $(cmp /tmp/new.f32 /tmp/old.f32 && echo identical) ($(stat -c %s /tmp/new.f32) bytes)"
done
ts bits
wait %1 2>/dev/null   # a bare `wait` would also wait for the tee above (bash >= 5.1) and never return
for sw in 0 1; do
  if [ "${SCRIPT_RUN:-1}" = 2 ]; then export CINFER_CUDA_ROUTE_RANK=$((2 * sw)); else export CINFER_CUDA_ROUTE_SPLIT=$sw; fi
  CINFER_CUDA_GBAR_FLIP=$sw CINFER_CUDA_PROF_OUT=/tmp/p$sw.prof timeout -k 5 60 /tmp/pp/cinfer bench --model $M --device cuda --prompt-len 512 --gen 16 > $O/prof$sw.log 2>&1
  echo "prof switches=$sw: $(grep -E '^decode' $O/prof$sw.log | sed 's/  */ /g' | cut -c1-80)"
  python3 bench/prof_phases.py /tmp/p$sw.prof | grep "moe fused" | cut -c1-900
done
unset CINFER_CUDA_ROUTE_RANK CINFER_CUDA_ROUTE_SPLIT
ts prof
if [ "${SCRIPT_RUN:-1}" = 2 ]; then VARS="0,0 1,1 2,1 2,0"; RK=CINFER_CUDA_ROUTE_RANK; else VARS="0,0 1,0 0,1 1,1"; RK=CINFER_CUDA_ROUTE_SPLIT; fi
for r in 1 2 3; do for e in $VARS; do
  set -- ${e/,/ }
  left 520 || break 2
  echo "round $r $RK=$1 flip=$2: $(env $RK=$1 CINFER_CUDA_GBAR_FLIP=$2 timeout -k 5 40 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode' | sed 's/  */ /g' | cut -c1-80 | head -1)"
done; done
ts bench
if left 480; then   # the MoE fixtures against their transformers reference (tests/gpu/parity.sh)
  PARITY_ONLY='moe|deepseek_v3$|deepseek_v32$|deepseek_v3_fp8' CINFER=$C timeout $(( 560 - $(date +%s) + T0 )) bash tests/gpu/parity.sh > $O/parity.log 2>&1
  echo "gpu parity (MoE fixtures) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
fi
ts end
