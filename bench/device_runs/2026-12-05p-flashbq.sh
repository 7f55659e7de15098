#!/bin/bash
# 2026-12-05 (thirty-third session): the pipelined flash prefill with 128 query rows a block
# (attn_flash.cu BQ = 128, 8 warps: each K / V tile serves twice the rows) and the key segments'
# least length as a knob. Checks: the attention / rope_attend ops against the CPU on the default
# rule and with each form forced, racecheck of the 128-row kernel. Then Qwen3-8B dims 12 layers
# bf16, one binary, the forms alternating: prefill after a cached prefix and fresh.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
BD=/tmp/cb; mkdir -p $BD
( nice -n 5 timeout 150 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1 ) &
for sw in "" "CINFER_CUDA_FLASH_BQ=64" "CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_SEGMIN=64" "CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_LDM=0"; do
  for o in "cuda attention" "cuda rope_attend"; do
    f="$O/ops-$(echo "$sw $o" | tr -c 'A-Za-z0-9\n' _).log"
    env $sw timeout 90 $T --quick --only "$o" > "$f" 2>&1
    ts "[$sw] ops '$o' rc $?: $(grep -c '^PASS' "$f") pass $(grep -c '^FAIL' "$f") fail"; grep "^FAIL" "$f" | head -3
  done
done
CINFER_CUDA_FLASH_BQ=128 timeout 120 $SAN --tool racecheck --error-exitcode 99 --print-limit 5 $T --quick --only "cuda rope_attend paged" > $O/racecheck.log 2>&1
ts "racecheck bq128 rc $? $(grep -c '^PASS' $O/racecheck.log) pass"; grep -E "ERROR SUMMARY|RACE" $O/racecheck.log | head -3
wait; ts "made $(du -sh $BD/qwen3-8b-12l | cut -f1)"
b() { env $1 timeout 30 $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len $2 --depth $3 --gen 2 --reps 3 2>&1 | grep -E "^prefill" | tail -1 | sed 's/.*= //; s/ tok.s.*//'; }
for r in 1 2; do
  for s in "124 1372" "216 1280" "344 1920" "1000 0" "4096 0" "344 8192"; do
    line="prefill $s:"
    for cfg in CINFER_CUDA_FLASH_BQ=64 CINFER_CUDA_FLASH_BQ=128 "CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_SEGMIN=128" "CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_SEGMIN=64" "CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_LDM=0"; do
      line="$line | $(echo $cfg | sed 's/CINFER_CUDA_FLASH_//g') $(b "$cfg" $s)"
    done
    ts "$line"
  done
done
ts end
