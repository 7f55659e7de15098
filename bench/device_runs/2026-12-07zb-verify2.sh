#!/bin/bash
# 2026-12-07 (fifty-first session): the rest of za's suite half (za's 320 s limit cut it inside parity):
# ops-alt, ops-flash, snapshot, parity, with each step's log tail printed (a call returns only ~8 files).
# Staging: `make gpu-stage`, carry [".gpuz"]; ~6 min.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
OUT=/tmp/suite GPU_STEPS="ops-alt ops-flash snapshot parity" timeout 540 bash tests/gpu/run.sh --quick > /tmp/suite.log 2>&1
echo "run.sh rc=$?"; tail -16 /tmp/suite.log
for f in ops_alt ops_flash snapshot; do echo "-- $f: $(grep -hE '^# [0-9]+ passed' /tmp/suite/logs/$f.log | tail -2 | tr '\n' ' ')"; grep -h ^FAIL /tmp/suite/logs/$f.log | head -3; done
[ -f /tmp/suite/logs/parity.log ] && { echo "-- parity: $(grep -cE '^PASS' /tmp/suite/logs/parity.log) PASS, $(grep -cE '^FAIL' /tmp/suite/logs/parity.log) FAIL"; grep -E '^FAIL' /tmp/suite/logs/parity.log | head -5; }
ts end
