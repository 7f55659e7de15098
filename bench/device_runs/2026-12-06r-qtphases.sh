#!/bin/bash
# 2026-12-06 (fortieth session), first call: where a quantized GEMV's ~9 us go. The lib built with
# prof.cuh's phase marks (`make gpu-stage-prof`, .gpuz/prof.so.xz, run with the staged binary) over
# decode steps of Qwen3-30B-A3B dims 12 layers mlx4 (make-random --seed 1, bench/make_q4_pair.py)
# and DeepSeek-V2-Lite dims 14 layers fp8 (make-random --dtype fp8 --seed 1); bench/prof_phases.py
# reads the records. Plain decode tok/s of both beside it (the staged lib, no marks).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
# this call carried the prof lib as the staged one (the tree and two libs did not fit a call): the
# plain tok/s lines below ran it too, with CINFER_CUDA_PROF_OUT unset (marks recorded, not written)
mkdir -p /tmp/prof && cp .gpu/cinfer .gpu/libcinfer_cuda.so /tmp/prof/
CP=/tmp/prof/cinfer
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
( nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1 ) &
timeout 150 $C make-random --config bench/deepseek-v2-lite-dims.config.json --out /tmp/ds8 --dtype fp8 --seed 1 --layers 14 > $O/makeds.log 2>&1
ts "ds8 made rc $?"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
ts "ds8 plain: $(b $C bench --model /tmp/ds8)"
CINFER_CUDA_PROF_OUT=/tmp/ds8.prof timeout 60 $CP bench --model /tmp/ds8 --device cuda --prompt-len 512 --gen 8 > $O/ds8-prof.log 2>&1
ts "ds8 prof rc $? $(grep -E '^decode' $O/ds8-prof.log | sed 's/  */ /g')"
python3 bench/prof_phases.py /tmp/ds8.prof --step 4 > $O/ds8-phases.txt 2>&1; head -40 $O/ds8-phases.txt
wait; ts "q30 made $(tail -1 $O/make-q4.log)"
ts "mlx4 plain: $(b $C bench --model /tmp/q30pair/mlx4)"
CINFER_CUDA_PROF_OUT=/tmp/q4.prof timeout 60 $CP bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 512 --gen 8 > $O/q4-prof.log 2>&1
ts "mlx4 prof rc $? $(grep -E '^decode' $O/q4-prof.log | sed 's/  */ /g')"
python3 bench/prof_phases.py /tmp/q4.prof --step 4 > $O/q4-phases.txt 2>&1; cat $O/q4-phases.txt | head -90
ts end
