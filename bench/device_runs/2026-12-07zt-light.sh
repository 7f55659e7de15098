#!/bin/bash
# Fifty-fourth session: zs's checks cut to what a nearly spent device budget allows (every start
# this session was refused): test_determinism on the box's Xeon (mlx_avx2.c's bits against
# amx_mlx.c's VNNI and tile forms), the MLA op tests on the default and with tensor cores at every
# context (review commits 50aafa7 / d4fa871), batched decode rows on CUDA, DeepSeek GPU parity.
# Staging: `make gpu-stage`, then build/tests/test_determinism stripped into .gpuz/; carry [".gpuz"].
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w -E 'avx512_vnni|amx_int8' /proc/cpuinfo | sort | uniq -c
timeout 120 .gpuz/test_determinism > $O/determinism.log 2>&1
echo "determinism rc=$?: $(grep -c '^PASS' $O/determinism.log) PASS, $(grep -c '^FAIL' $O/determinism.log) FAIL"
grep -E '^FAIL|NOTE' $O/determinism.log | cut -c1-220 | head -12
for sw in '' CINFER_CUDA_MLA_TC_MIN=0; do
  env $sw timeout 120 $T --only _attend > /tmp/ops.log 2>&1
  echo "ops _attend [$sw] rc=$?: $(grep -c '^PASS' /tmp/ops.log) PASS, $(grep -c '^FAIL' /tmp/ops.log) FAIL"
  grep -E '^FAIL' /tmp/ops.log | cut -c1-200 | head -4
done
CINFER_TEST_DEVICE=cuda timeout 100 .gpu/tests/test_batch_argmax > /tmp/batch.log 2>&1
echo "batch rc=$?: $(tail -1 /tmp/batch.log)"
PARITY_ONLY='deepseek' CINFER=$C timeout 90 bash tests/gpu/parity.sh > /tmp/par.log 2>&1
echo "parity deepseek rc=$?: $(grep -cE '^PASS' /tmp/par.log) PASS, $(grep -cE '^FAIL' /tmp/par.log) FAIL"; grep -E '^FAIL' /tmp/par.log | head -4
ts end
