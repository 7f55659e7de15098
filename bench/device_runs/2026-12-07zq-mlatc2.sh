#!/bin/bash
# Fifty-third session, second device call: mla_tc.cu with its shared memory within cb_smem_ok's
# 200 KiB (lat <= 672), the default now TC=2 (prefill chunks too) with decode rows from 1024 keys
# (CINFER_CUDA_MLA_TC_MIN). Op tests (default, TC_MIN=0, TC=0 with the CUDA-core decode kernel,
# runs of 3 tiles with the column-block combine); ds14 decode after 512 / 1024 / 2048 / 4096 with
# TC_MIN=0 (tensor cores at every context), TC=0 CSLICE=0 (the CUDA cores, main before) and the
# default, alternating (prefill of TC=0 against the others: the prefill's kernel); DeepSeek GPU
# parity; memcheck / racecheck of two cases. Staging: `make gpu-stage`, carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 300 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  ts made ) &
for sw in '' CINFER_CUDA_MLA_TC_MIN=0 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_DECODE=1' 'CINFER_CUDA_MLA_TC_MIN=0 CINFER_CUDA_MLA_TC_RUN=3 CINFER_CUDA_MLA_CSLICE=0'; do
  env $sw timeout 150 $T --only _attend > /tmp/ops.log 2>&1
  echo "ops _attend [$sw] rc=$?: $(grep -c '^PASS' /tmp/ops.log) PASS, $(grep -c '^FAIL' /tmp/ops.log) FAIL"
  grep -E '^FAIL|^# ' /tmp/ops.log | cut -c1-200 | head -8
done
ts ops
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 60 $C bench --model $D --device cuda --prompt-len $1 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for r in 1 2; do for p in 4096 512 2048 1024; do
  [ $r = 2 ] && [ $p -lt 4096 ] && [ $p -gt 512 ] && continue
  for sw in 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_CSLICE=0' CINFER_CUDA_MLA_TC_MIN=0 ''; do
    echo "ds14 r$r after $p [$sw]: $(env $sw bash -c "$(declare -f b); C=$C D=$D b $p")"
  done
done; done
ts bench
PARITY_ONLY='deepseek' CINFER=$C timeout 90 bash tests/gpu/parity.sh > /tmp/par.log 2>&1
echo "parity deepseek rc=$?: $(grep -cE '^PASS' /tmp/par.log) PASS, $(grep -cE '^FAIL' /tmp/par.log) FAIL"; grep -E '^FAIL' /tmp/par.log | head -4
ts parity
for tool in memcheck racecheck; do
  for only in 'mla_attend one cache n=1 pos0=1099 ' 'mla_attend one cache n=64 pos0=50 '; do
    CINFER_CUDA_MLA_TC_MIN=0 timeout 60 $SAN --tool $tool --error-exitcode 9 $T --only "$only" > /tmp/san.log 2>&1
    echo "$tool [$only] rc=$? $(grep -cE '^PASS' /tmp/san.log) PASS $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log | head -1)"
  done
done
ts end
