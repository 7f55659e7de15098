#!/bin/bash
# 2026-12-04 (twenty-first session), fifth call: call j's ncu found attn_flash_pipe_kernel<128>
# latency-bound (1.9 active warps a scheduler, 0.45 eligible, issue slots 30% busy, memory 30%).
# Key tile 32 (160 registers, 86 KB: two blocks an SM) against 16 (128 registers, 52 KB: four
# blocks), CINFER_CUDA_FLASH_BK, checked, then the prefill bench alternating (Qwen3-8B dims 12 layers).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start
timeout 100 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 &
mk=$!
for bk in 32 16; do
  CINFER_CUDA_FLASH_BK=$bk timeout 150 $T --only "cuda attention" > $O/ops-att-$bk.log 2>&1; a=$?
  CINFER_CUDA_FLASH_BK=$bk timeout 150 $T --only "cuda rope_attend" > $O/ops-rope-$bk.log 2>&1; b=$?
  ts "ops bk=$bk: attention rc=$a $(grep '^# ' $O/ops-att-$bk.log | tail -1); rope_attend rc=$b $(grep '^# ' $O/ops-rope-$bk.log | tail -1)"
done
grep -hE "^FAIL" $O/ops-*.log | head
CINFER_CUDA_FLASH_BK=16 timeout 150 $SAN --tool racecheck --error-exitcode 99 --print-limit 10 $T --quick --only "cuda rope_attend" > $O/racecheck.log 2>&1
ts "racecheck bk=16 rope_attend rc=$? $(grep '^# ' $O/racecheck.log | tail -1) $(grep -m1 'RACECHECK SUMMARY' $O/racecheck.log)"
wait $mk
ts made
b() { timeout 40 env CINFER_CUDA_FLASH_BK=$1 CINFER_CUDA_FLASH_SPLIT=$2 $C bench --model /tmp/q8 --device cuda --prompt-len $3 --depth $4 --gen 2 2>&1 | grep -E '^prefill ' | sed 's/  */ /g' | cut -c1-75; }
for rep in 1 2; do
  for pd in "344 0" "344 1920" "216 1280" "1000 0" "4096 0" "344 8192"; do set -- $pd
    for sw in "32 1" "16 1" "16 0"; do ts "p$1 d$2 bk,split=$sw: $(b $sw $1 $2)"; done
  done
done
ts end
