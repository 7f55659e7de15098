#!/bin/bash
# Fifty-third session: MLA attention on tensor cores (mla_tc.cu, CINFER_CUDA_MLA_TC 0 / 1 / 2) and
# the combine with the chunks sliced among warps (CINFER_CUDA_MLA_CSLICE). The MLA / DSA attention
# op tests on the default (TC at <= 4 rows, sliced combine), on TC=2 (every row count), on TC=0
# with the CUDA-core decode kernel, on runs of 3 tiles with the column-block combine; memcheck and
# racecheck of two cases; the DeepSeek GPU parity on the default and on TC=2. ds14 made in the
# background for the next call (2026-12-07zp-mlatc-bench.sh on the same warm machine).
# Staging: `make gpu-stage`, carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 300 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  ts made ) &
for sw in '' CINFER_CUDA_MLA_TC=2 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_DECODE=1' 'CINFER_CUDA_MLA_TC_RUN=3 CINFER_CUDA_MLA_CSLICE=0'; do
  env $sw timeout 150 $T --only _attend > /tmp/ops.log 2>&1
  echo "ops _attend [$sw] rc=$?: $(grep -c '^PASS' /tmp/ops.log) PASS, $(grep -c '^FAIL' /tmp/ops.log) FAIL"
  grep -E '^FAIL|^# ' /tmp/ops.log | head -8; cp /tmp/ops.log "$O/ops_$(echo "$sw" | tr -c 'A-Za-z0-9=\n' _).log"
done
grep -E 'mla_attend' "$O/ops_.log" | cut -c1-150 | head -40
ts ops
for tool in memcheck racecheck; do
  for only in 'mla_attend own caches at +4 bytes n=2' 'mla_attend one cache n=1 pos0=99 '; do
    timeout 100 $SAN --tool $tool --error-exitcode 9 $T --only "$only" > /tmp/san.log 2>&1
    echo "$tool [$only] rc=$? $(grep -cE '^PASS' /tmp/san.log) PASS $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log | head -1)"
  done
done
ts sanitizers
for sw in '' CINFER_CUDA_MLA_TC=2; do
  env $sw PARITY_ONLY='deepseek' CINFER=$C timeout 90 bash tests/gpu/parity.sh > /tmp/par.log 2>&1
  echo "parity deepseek [$sw] rc=$?: $(grep -cE '^PASS' /tmp/par.log) PASS, $(grep -cE '^FAIL' /tmp/par.log) FAIL"; grep -E '^FAIL' /tmp/par.log | head -4
done
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
ls $D > /dev/null && ts "parity; ds14 made"
