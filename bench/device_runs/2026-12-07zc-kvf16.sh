#!/bin/bash
# 2026-12-07 (fifty-first session): main after the CPU's f16 attention cache (backend.h's ci_backend gained
# kv_f16, the families size their caches with ci_kv_slots; the CUDA backend leaves it 0 and refuses --kv-f16):
# the suite's batch, paged, snapshot, parity and generate steps on the device, each step's counts printed;
# then --kv-f16 with --device cuda must be one line naming the CUDA backend.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~5 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
OUT=/tmp/suite GPU_STEPS="batch paged snapshot parity generate" timeout 420 bash tests/gpu/run.sh > /tmp/suite.log 2>&1
echo "run.sh rc=$?"; grep -E "^(batch|paged|snapshot|parity|generate) " /tmp/suite.log
grep -hE "^FAIL" /tmp/suite/logs/*.log 2>/dev/null | head -5
$C logits --model tests/fixtures/qwen3_tied --tokens 1,2,3 --out /tmp/kv.f32 --device cuda --kv-f16 > $O/kv.out 2> $O/kv.err
echo "--kv-f16 --device cuda: rc=$? lines=$(wc -l < $O/kv.err): $(cat $O/kv.err)"
ts end
