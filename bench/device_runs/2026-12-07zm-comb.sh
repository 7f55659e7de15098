#!/bin/bash
# 2026-12-07 (fifty-second session): MLA attention's combine in column blocks (CINFER_CUDA_MLA_COMB:
# columns a block, default 64 then, 128 after this call; 0 = a whole row a block, the form before). Checks: test_cuda_ops
# mla_attend (each case also = the COMB=0 backend bit for bit), paged, dsa_attend (--quick);
# `logits --step` of the DeepSeek V3 / V3.2 fixtures cmp-identical with COMB=0 / 64 / 128; DeepSeek GPU
# parity. Speed: ds14 (DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16) decode after 512 and
# 4096 with COMB=0 / 64 / 128 alternating, two rounds.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~5 min.
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
echo "ops mla_attend rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep -E '^(FAIL|# cuda)' $O/ops.log | head -4
timeout 60 $T --only "paged" > /tmp/pg.log 2>&1
echo "ops paged rc=$?: $(grep -c '^PASS' /tmp/pg.log) PASS, $(grep -c '^FAIL' /tmp/pg.log) FAIL"; grep ^FAIL /tmp/pg.log | head -3
timeout 60 $T --quick --only "dsa_attend" > /tmp/dsa.log 2>&1
echo "ops dsa_attend rc=$?: $(grep -c '^PASS' /tmp/dsa.log) PASS, $(grep -c '^FAIL' /tmp/dsa.log) FAIL"; grep ^FAIL /tmp/dsa.log | head -3
for f in deepseek_v3 deepseek_v3_fp8 deepseek_v3_long deepseek_v32 deepseek_v32_long; do
  toks=$(tr -d ' \n' < tests/fixtures/$f/ref.json | grep -o '"tokens":\[[0-9,]*\]' | sed 's/.*\[\(.*\)\]/\1/')
  for a in 0 64 128; do CINFER_CUDA_MLA_COMB=$a timeout 60 $C logits --model tests/fixtures/$f --tokens "$toks" --step --device cuda --out /tmp/st$a.f32 > /dev/null 2>&1; done
  echo "$f logits --step: 0=64 $(cmp -s /tmp/st0.f32 /tmp/st64.f32 && echo same || echo DIFF), 0=128 $(cmp -s /tmp/st0.f32 /tmp/st128.f32 && echo same || echo DIFF) ($(stat -c %s /tmp/st0.f32) bytes)"
done
PARITY_ONLY='deepseek' CINFER=$C timeout 60 bash tests/gpu/parity.sh > /tmp/par.log 2>&1
echo "parity deepseek rc=$?: $(grep -cE '^PASS' /tmp/par.log) PASS, $(grep -cE '^FAIL' /tmp/par.log) FAIL, $(grep -cE '^SKIP' /tmp/par.log) SKIP"; grep -E '^FAIL' /tmp/par.log | head -4
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 90 $C bench --model $D --device cuda --prompt-len $1 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-60; }
for r in 1 2; do for p in 512 4096; do for a in 0 64 128; do
  echo "ds14 r$r after $p MLA_COMB=$a: $(CINFER_CUDA_MLA_COMB=$a b $p)"
done; done; done
ts end
