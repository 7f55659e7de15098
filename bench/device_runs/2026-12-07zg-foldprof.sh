#!/bin/bash
# 2026-12-07 (fiftieth session): (1) where the ungated shared-expert fold loses (call zd/ze: ds14 -6%, nem12
# -13%): moe_fused's phases (prof.cuh marks, .gpuz/prof.so.xz = `make gpu-stage-prof` of the same tree) with
# CINFER_CUDA_MOE_SHARED=1 and 0 on DeepSeek-V2-Lite dims 14 layers and Nemotron-3-Nano dims 12 layers;
# (2) the GEMV form switches together on ds14 (call zf: FEW=1 +0.6..0.9%, SHORT=2 +1.0..1.3%, SHORT=3
# +0.7..1.0%) and FEW=1 on LFM2-8B-A1B dims 8 layers (its 2048 x 2048 out_proj / o_proj).
# Staging (the carry's 64 MiB: the prof build as the staged library, no tests): `make gpu-stage-prof`, then
# `rm .gpuz/prof.so.xz; STAGE_TESTS=0 STAGE_CUDA_LIB=build-prof/libcinfer_cuda.so bash tests/gpu/stage.sh build`,
# carry [".gpuz"]; ~3 min. The GEMV switches (2) ran in the next call, on the plain library.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 N=/tmp/nem12 L=/tmp/lfm8
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $N ] || timeout 240 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out $N --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  ts made ) &
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
for mm in $D $N; do
  for v in 1 0; do
    CINFER_CUDA_MOE_SHARED=$v CINFER_CUDA_PROF_OUT=/tmp/p$v.prof timeout 90 $C bench --model $mm --device cuda --prompt-len 512 --gen 32 > $O/prof$v.log 2>&1
    echo "$(basename $mm) prof build MOE_SHARED=$v: $(grep -E '^decode' $O/prof$v.log | sed 's/  */ /g' | cut -c1-80)"
    python3 bench/prof_phases.py /tmp/p$v.prof | grep -A0 "moe fused" | cut -c1-600
  done
done
ts prof
ts end
