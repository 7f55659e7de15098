#!/bin/bash
# Fifty-fourth session, first device call: the review commits 50aafa7 / d4fa871 (mla_tc.cu's tile
# load by the run's end, the combine weights' size helper), compiled but not run on a GPU in the
# fifty-third session. tests/gpu/run.sh steps ops, ops-mla, batch (batched decode rows on CUDA:
# n > 4 rows now take the tensor-core MLA kernel), paged, parity of every fixture, then ds14
# decode after 512 / 4096 once (the default against TC=0). First, on the box's Xeon (AVX-512 VNNI
# and AMX-INT8): test_determinism of the CPU session's mlx_avx2.c (--mlx-amx / --mlx-amx8 on AVX2),
# which checks its bits against amx_mlx.c's tiles and VNNI forms there (copied as
# .gpuz/test_determinism; libc and libm only). Staging: `make gpu-stage`, carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w -E 'avx512_vnni|amx_int8' /proc/cpuinfo | sort | uniq -c
[ -x .gpuz/test_determinism ] && { timeout 120 .gpuz/test_determinism > $O/determinism.log 2>&1; echo "determinism rc=$?: $(grep -c '^PASS' $O/determinism.log) PASS, $(grep -c '^FAIL' $O/determinism.log) FAIL"; grep -E '^FAIL|NOTE' $O/determinism.log | cut -c1-220 | head -12; }
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( timeout 300 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1; ts made ) &
for sw in '' CINFER_CUDA_MLA_TC_MIN=0 'CINFER_CUDA_MLA_TC=0 CINFER_CUDA_MLA_DECODE=1'; do
  env $sw timeout 150 $T --only _attend > /tmp/ops.log 2>&1
  echo "ops _attend [$sw] rc=$?: $(grep -c '^PASS' /tmp/ops.log) PASS, $(grep -c '^FAIL' /tmp/ops.log) FAIL"
  grep -E '^FAIL' /tmp/ops.log | cut -c1-200 | head -4
done
ts ops
CINFER_TEST_DEVICE=cuda timeout 120 .gpu/tests/test_batch_argmax > /tmp/batch.log 2>&1
echo "batch rc=$?: $(tail -1 /tmp/batch.log)"
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_paged > /tmp/paged.log 2>&1
echo "paged rc=$?: $(tail -1 /tmp/paged.log)"
ts batch
CINFER=$C timeout 240 bash tests/gpu/parity.sh > /tmp/par.log 2>&1
echo "parity rc=$?: $(grep -cE '^PASS' /tmp/par.log) PASS, $(grep -cE '^FAIL' /tmp/par.log) FAIL"; grep -E '^FAIL' /tmp/par.log | head -4
ts parity
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 60 $C bench --model $D --device cuda --prompt-len $1 --gen 128 2>&1 | grep -E '^(prefill|decode) ' | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for p in 512 4096; do for sw in 'CINFER_CUDA_MLA_TC=0' ''; do
  echo "ds14 after $p [$sw]: $(env $sw bash -c "$(declare -f b); C=$C D=$D b $p")"
done; done
ts end
