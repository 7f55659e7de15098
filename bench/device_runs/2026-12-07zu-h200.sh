#!/bin/bash
# Fifty-fifth session (2026-12-07): zs's checks and #16's rows, in two calls on one warm machine.
# PART=check: the box's Xeon runs test_determinism of mlx_avx2.c (AVX2 bits == amx_mlx.c's VNNI and
# tile bits there); test_cuda_ops `_attend` on the default, TC_MIN=0 and TC=0 with the CUDA-core decode
# kernel (50aafa7 / d4fa871, mla_tc.cu, never run on a GPU); batched and paged rows on CUDA; GPU parity
# of every fixture. PART=speed: ds14 (DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16) and a3b12
# (Qwen3-30B-A3B dims, 12 layers bf16), pp512, decode after 512 and 4096, two rounds; then the per-step
# kernel tables (ncu, bench/ncu_steps.py) of both after 512. Staging: `make gpu-stage`, then
# `cp build/tests/test_determinism .gpuz/ && strip --strip-unneeded .gpuz/test_determinism`; carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run-${PART:-check}.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start $PART; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 M=/tmp/a3b12
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
mk() {
  [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $M ] || timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  ts made
}
if [ "${PART:-check}" = check ]; then
  lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w -E 'avx512_vnni|amx_int8' /proc/cpuinfo | sort | uniq -c
  [ -x .gpuz/test_determinism ] && { timeout 150 .gpuz/test_determinism > $O/determinism.log 2>&1; echo "determinism rc=$?: $(grep -c '^PASS' $O/determinism.log) PASS, $(grep -c '^FAIL' $O/determinism.log) FAIL"; grep -E '^FAIL|NOTE|avx2' $O/determinism.log | cut -c1-220 | head -16; }
  ( mk ) &
  for sw in '' CINFER_CUDA_MLA_TC_MIN=0 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_DECODE=1'; do
    env $sw timeout 120 $T --only _attend > /tmp/ops.log 2>&1
    echo "ops _attend [$sw] rc=$?: $(grep -c '^PASS' /tmp/ops.log) PASS, $(grep -c '^FAIL' /tmp/ops.log) FAIL"
    grep -E '^FAIL' /tmp/ops.log | cut -c1-200 | head -4
  done
  ts ops
  CINFER_TEST_DEVICE=cuda timeout 100 .gpu/tests/test_batch_argmax > /tmp/batch.log 2>&1
  echo "batch rc=$?: $(tail -1 /tmp/batch.log)"
  CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_paged > /tmp/paged.log 2>&1
  echo "paged rc=$?: $(tail -1 /tmp/paged.log)"
  ts batch
  CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1
  echo "parity rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E '^FAIL' $O/parity.log | head -4
  ts parity
  wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
else
  mk
  b() { timeout -k 5 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
  for r in 1 2; do for p in 512 4096; do for m in $D $M; do
    echo "r$r $(basename $m) P=$p: $(b $m $p)"
  done; done; done
  ts bench
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for mm in $D $M; do
    for g in 1 5; do
      timeout 100 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        --print-summary per-kernel $C bench --model $mm --device cuda --prompt-len 512 --gen $g > $O/ncu-$(basename $mm)-g$g.txt 2>&1
    done
    echo "per-step table, $mm after 512:"; python3 bench/ncu_steps.py $O/ncu-$(basename $mm)-g1.txt $O/ncu-$(basename $mm)-g5.txt 2>&1 | head -40
  done
  xz -9 $O/ncu-*.txt 2>/dev/null
fi
ts end
