#!/bin/bash
# 2026-12-05 (thirty-first session), first call: DeepSeek V4's held snapshots (device-to-device;
# unchecked on a device last session) and its batched decode steps recorded as graphs per row
# count (ci_runner_batch_step, issue #19): test_snapshot, test_paged (test_batch_graphs now runs
# deepseek_v4: replayed = eager bit for bit, rows reordered), test_batch_argmax on CUDA, the
# serve-v4 step; then `cinfer bench --batch` on V4-Flash dims 4 layers fp8-fp4 (make-random --seed 1
# here) with graphs and with --no-graphs, alternating, at 8 and 32 sequences.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
( nice -n 5 timeout 300 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
for t in test_snapshot test_paged test_batch_argmax; do
  CINFER_TEST_DEVICE=cuda timeout 120 .gpu/tests/$t > $O/$t.log 2>&1; ts "$t rc $? $(grep -c ^PASS $O/$t.log) pass $(grep -c ^FAIL $O/$t.log) fail"
  grep -E "^FAIL" $O/$t.log | head -5
done
GPU_STEPS="serve-v4" OUT=$O/suite timeout 90 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "serve-v4 rc $?"; grep serve-v4 $O/suite.txt
wait; ts "made $(du -sh /tmp/v4 2>&1 | cut -f1) $(tail -1 $O/make.log)"
b() { timeout 120 $C bench --model /tmp/v4 --device cuda --prompt-len 256 --gen 64 --batch $1 $2 2>&1 | grep -E "^decode" | sed 's/  */ /g' | cut -c1-90 | tr '\n' ' '; }
for r in 1 2; do
  for nb in 8 32; do
    ts "graphs nb=$nb r$r: $(b $nb)"
    ts "eager  nb=$nb r$r: $(b $nb --no-graphs)"
  done
done
ts end
