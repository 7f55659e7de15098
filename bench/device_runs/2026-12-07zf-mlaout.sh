#!/bin/bash
# 2026-12-07 (fiftieth session): (1) mla_attend_heads (CINFER_CUDA_MLA_OUT=1): the MLA decode's partial runs
# summed where the value heads stage their rows, instead of mla_combine_kernel's launch (7.1 us of a ds14
# layer's serialised step, call ze): test_cuda_ops against the two ops bit for bit, `logits --step` of the
# DeepSeek fixtures cmp-identical on / off, their GPU parity with it on, decode on / off; (2) the one-token GEMV
# forms of the small MLA projections (measuring switches, gemv.cu): CINFER_CUDA_GEMV_FEW=1..3 (1025..2048 rows
# of 1025..2048 columns: ds14's q_a + kv_a 1600 rows at 780 GB/s, o_proj 2048 at 1247) and
# CINFER_CUDA_GEMV_SHORT=1..3 (2048..4096 rows of <= 1024 columns: q_b 3072 rows at 840 GB/s; Qwen3-0.6B's
# q/k/v). Staging: `make gpu-stage`, carry [".gpuz"]; ~6 min.
# A record: the measuring switches it names were removed after it ran (bench/RESULTS.md, fiftieth session).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 Q=/tmp/q06
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $Q ] || timeout 240 $C make-random --config bench/qwen3-0.6b.config.json --out $Q --dtype bf16 --seed 1 > $O/make2.log 2>&1
  ts made ) &
timeout 120 $T --only "mla_attend_heads" > $O/ops.log 2>&1
echo "ops mla_attend_heads rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
CINFER_CUDA_GEMV_FEW=1 CINFER_CUDA_GEMV_SHORT=1 timeout 60 $T --quick --only "matmul" > $O/ops2.log 2>&1
echo "ops matmul FEW=1 SHORT=1 rc=$?: $(grep -c '^PASS' $O/ops2.log) PASS, $(grep -c '^FAIL' $O/ops2.log) FAIL"; grep ^FAIL $O/ops2.log | head -4
toks=1,5,9,2,7,3,11,4,8,6,12,10
for fx in deepseek_v3 deepseek_v3_nolora deepseek_v3_fp8; do
  CINFER_CUDA_MLA_OUT=1 timeout 60 $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/new.f32 --step --device cuda 2>$O/lg1.err
  CINFER_CUDA_MLA_OUT=0 timeout 60 $C logits --model tests/fixtures/$fx --tokens $toks --out /tmp/old.f32 --step --device cuda 2>$O/lg0.err
  echo "step logits $fx MLA_OUT 1 vs 0: $(cmp /tmp/new.f32 /tmp/old.f32 >/dev/null 2>&1 && echo identical || echo "DIFFER ($(tail -1 $O/lg1.err))")"
  rm -f /tmp/new.f32 /tmp/old.f32
done
CINFER_CUDA_MLA_OUT=1 PARITY_ONLY='deepseek' CINFER=$C timeout 100 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity (deepseek, MLA_OUT=1) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { env $1 timeout -k 5 60 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do
  for e in X=0 CINFER_CUDA_MLA_OUT=1 CINFER_CUDA_GEMV_FEW=1 CINFER_CUDA_GEMV_FEW=2 CINFER_CUDA_GEMV_FEW=3 CINFER_CUDA_GEMV_SHORT=1 CINFER_CUDA_GEMV_SHORT=2 CINFER_CUDA_GEMV_SHORT=3; do
    echo "ds14 r$r $e: $(b $e $D)"; done
  for e in X=0 CINFER_CUDA_GEMV_SHORT=1 CINFER_CUDA_GEMV_SHORT=2 CINFER_CUDA_GEMV_SHORT=3; do echo "q06 r$r $e: $(b $e $Q)"; done
done
ts end
