#!/bin/bash
# 2026-12-04 (twenty-fifth session), first call: the hybrids' attention rows on the block pool
# (LFM2, Qwen3.5 / Qwen3-Next, Nemotron-H), states-only snapshots, copy on write at match and
# truncation. The GPU suite: test_paged on the device now runs the hybrids too (shared = own bit
# for bit, blocks + restored states, copy on write), and serve-qh / serve-nh put the qwen3_5 and
# nemotron_h fixtures behind cinfer serve --device cuda (serve_load.py check).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
OUT=$O/suite timeout 560 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"
tail -22 $O/suite.txt
mkdir -p /tmp/l && tar xzf $O/suite/logs.tar.gz -C /tmp/l 2>/dev/null
for f in paged serve-qh serve-nh; do
  l=/tmp/l/logs/$f.log
  [ -f $l ] && { echo "== $f"; grep -E "^FAIL|^PASS" $l | head -20; }
done
