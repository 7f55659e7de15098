#!/bin/bash
# 2026-12-07 (fifty-second session): the MLA decode kernel's key rows by cp.async rings
# (CINFER_CUDA_MD_ASYNC=1: 4 slots a warp, 3 rows in flight; =2: 6 slots, two keys a step) against
# the register form (=0, the default until measured). Checks: test_cuda_ops mla_attend (the three
# forms bit for bit, and each against the CPU), paged = unpaged and dsa_attend with each form on,
# `logits --step` of the DeepSeek V3 / V3.2 fixtures cmp-identical across the forms, their GPU
# parity with =1 and =2. Speed: ds14 (DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16) decode
# after 512 and 4096, the forms alternating, two rounds.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~8 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 300 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  ts made ) &
timeout 100 $T --only "mla_attend" > $O/ops.log 2>&1
echo "ops mla_attend rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
for a in 1 2; do
  CINFER_CUDA_MD_ASYNC=$a timeout 60 $T --only "paged" > /tmp/pg$a.log 2>&1
  echo "MD_ASYNC=$a ops paged rc=$?: $(grep -c '^PASS' /tmp/pg$a.log) PASS, $(grep -c '^FAIL' /tmp/pg$a.log) FAIL"; grep ^FAIL /tmp/pg$a.log | head -3
  CINFER_CUDA_MD_ASYNC=$a timeout 60 $T --quick --only "dsa_attend" > /tmp/dsa$a.log 2>&1
  echo "MD_ASYNC=$a ops dsa_attend rc=$?: $(grep -c '^PASS' /tmp/dsa$a.log) PASS, $(grep -c '^FAIL' /tmp/dsa$a.log) FAIL"; grep ^FAIL /tmp/dsa$a.log | head -3
done
for f in deepseek_v3 deepseek_v3_nolora deepseek_v3_fp8 deepseek_v3_long deepseek_v32 deepseek_v32_long; do
  toks=$(tr -d ' \n' < tests/fixtures/$f/ref.json | grep -o '"tokens":\[[0-9,]*\]' | sed 's/.*\[\(.*\)\]/\1/')
  for a in 0 1 2; do CINFER_CUDA_MD_ASYNC=$a timeout 60 $C logits --model tests/fixtures/$f --tokens "$toks" --step --device cuda --out /tmp/st$a.f32 > /dev/null 2>&1; done
  echo "$f logits --step: 0=1 $(cmp -s /tmp/st0.f32 /tmp/st1.f32 && echo same || echo DIFF), 0=2 $(cmp -s /tmp/st0.f32 /tmp/st2.f32 && echo same || echo DIFF) ($(stat -c %s /tmp/st0.f32) bytes)"
done
for a in 1 2; do
  CINFER_CUDA_MD_ASYNC=$a PARITY_ONLY='deepseek' CINFER=$C timeout 90 bash tests/gpu/parity.sh > /tmp/par$a.log 2>&1
  echo "MD_ASYNC=$a parity deepseek rc=$?: $(grep -cE '^PASS' /tmp/par$a.log) PASS, $(grep -cE '^FAIL' /tmp/par$a.log) FAIL, $(grep -cE '^SKIP' /tmp/par$a.log) SKIP"; grep -E '^FAIL' /tmp/par$a.log | head -4
done
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 90 $C bench --model $D --device cuda --prompt-len $1 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-60; }
for r in 1 2; do for p in 512 4096; do for a in 0 1 2; do
  echo "ds14 r$r after $p MD_ASYNC=$a: $(CINFER_CUDA_MD_ASYNC=$a b $p)"
done; done; done
ts end
