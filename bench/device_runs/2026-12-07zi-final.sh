#!/bin/bash
# 2026-12-07 (fiftieth session), main's defaults after the session's changes (CB_MOE_SHARED 1 with an ungated
# shared expert's down as a GEMV after moe_fused; one-token GEMVs of 2048..4096 rows x <= 1024 columns two rows a
# warp): test_cuda_ops (--quick) matmul / norm_matmul forms and moe_norm_experts shared; GPU parity of every
# fixture; decode after 512 (and ds14 after 4096) of the session's checkpoints for the issue rows.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~6 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 N=/tmp/nem12 M=/tmp/a3b12 Q=/tmp/q06 Q3=/tmp/q35
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $M ] || timeout 240 $C make-random --config bench/qwen3-30b-a3b.config.json --out $M --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  [ -d $N ] || timeout 240 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out $N --dtype bf16 --seed 1 --layers 12 > $O/make3.log 2>&1
  [ -d $Q ] || timeout 240 $C make-random --config bench/qwen3-0.6b.config.json --out $Q --dtype bf16 --seed 1 > $O/make4.log 2>&1
  [ -d $Q3 ] || timeout 240 $C make-random --config bench/qwen3.5-35b-a3b.config.json --out $Q3 --dtype bf16 --seed 1 --layers 8 > $O/make5.log 2>&1
  ts made ) &
timeout 90 $T --quick --only "matmul" > $O/ops.log 2>&1
echo "ops --quick matmul rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
timeout 60 $T --only "moe_norm_experts shared" > $O/ops2.log 2>&1
echo "ops moe_norm_experts shared rc=$?: $(grep -c '^PASS' $O/ops2.log) PASS, $(grep -c '^FAIL' $O/ops2.log) FAIL"; grep ^FAIL $O/ops2.log | head -4
CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity (all) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL, $(grep -cE '^SKIP' $O/parity.log) SKIP"; grep -E "^FAIL" $O/parity.log | head -6
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { timeout -k 5 90 $C bench --model $1 --device cuda --prompt-len ${2:-512} --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do for mm in $D $M $N $Q3 $Q; do echo "$(basename $mm) r$r: $(b $mm)"; done; done
echo "ds14 after 4096: $(b $D 4096)"
echo "a3b12 after 4096: $(b $M 4096)"
ts end
