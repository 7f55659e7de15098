#!/bin/bash
# 2026-12-07 (fifty-first session): zc cut to what 5 minutes of device time left allow: GPU parity of every
# fixture after backend.h's ci_backend gained kv_f16 (the CUDA backend leaves it 0), and --kv-f16 with
# --device cuda refused in one line naming the CUDA backend.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~3 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
$C logits --model tests/fixtures/qwen3_tied --tokens 1,2,3 --out /tmp/kv.f32 --device cuda --kv-f16 > $O/kv.out 2> $O/kv.err
echo "--kv-f16 --device cuda: rc=$? lines=$(wc -l < $O/kv.err): $(cat $O/kv.err)"
CINFER=$C timeout 180 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity (all) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL, $(grep -cE '^SKIP' $O/parity.log) SKIP"; grep -E "^FAIL" $O/parity.log | head -6
ts end
