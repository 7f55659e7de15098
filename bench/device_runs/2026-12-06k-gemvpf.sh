#!/bin/bash
# 2026-12-06 (thirty-eighth session), fifth call: (1) the GPU suite's parity, memcheck-cli, serve and
# serve-e2e steps on the session's code (the fused rope_attend decode, 2026-12-06i, on by default);
# (2) gemv.cu's GEMVs asking the rest of each lane's weights into L2 before pdl_enter
# (CINFER_CUDA_GEMV_PF=1, off by default) against off: decode tok/s, one binary, alternating, two
# rounds, Qwen3-8B and Qwen3-30B-A3B dims, 12 layers bf16.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 120 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make8.log 2>&1;
 timeout 120 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1) &
mk=$!
GPU_STEPS="parity memcheck-cli serve serve-e2e" OUT=$O/suite timeout 260 bash tests/gpu/run.sh 2>&1 | tail -22
ts "suite steps done"
wait $mk; ts "made: $(du -sh /tmp/q8 /tmp/q30 2>&1 | cut -f1 | tr '\n' ' ')"
for round in 1 2; do
  for m in q8 q30; do
    for sw in 1 0; do
      CINFER_CUDA_GEMV_PF=$sw timeout 60 $C bench --model /tmp/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode  " | sed "s/^/r$round $m PF=$sw: /"
    done
  done
done
ts end
