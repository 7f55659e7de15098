#!/bin/bash
# 2026-12-04 (nineteenth session), first call: V4's indexer through dsa.cu's kernels (four lanes an
# entry for the scores, the radix select over staged keys) and the split decode attention
# (v4_attend_split_kernel + v4_attend_comb_kernel). Correctness (the v4 and dsa op tests with the
# switches on and off, memcheck, the deepseek_v4 / v32 fixtures' parity), then V4-Flash dims 4
# layers fp8-fp4 decode at depth 1024 and 65536 with the switches on / off alternating (all off =
# the kernels before this session), then a per-kernel profile at depth 65536 (nsys if present).
# Ran once (2026-12-04 03:2x UTC) with 162 s of device time left: the op tests ran (v4 15 / 0 with the
# switches on and off, dsa 47 / 0, memcheck v4 clean), parity did not find build/cinfer (fixed
# since: CINFER=), the session's device budget ran out before the benches: run it again.
# Ran whole in the twentieth session (2026-12-04 05:37-05:45 UTC, dab7d36): all checks PASS, d1024
# 737 / 742 tok/s, d65536 682 / 685 (0.92); the ncu step ran out of its 200 s profiling the 65536-token
# prefill too (bench/RESULTS.md).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
( nice -n 5 timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make-v4.log 2>&1 ) &
OFF="CINFER_CUDA_V4_SPLIT=0 CINFER_CUDA_DSA_SELECT=0 CINFER_CUDA_DSA_SCORE=0"
timeout 120 $T --only "v4" > $O/ops-v4.log 2>&1; ts "ops v4: $(tail -1 $O/ops-v4.log)"; grep "^FAIL" $O/ops-v4.log | head -5
env $OFF timeout 120 $T --only "v4" > $O/ops-v4-off.log 2>&1; ts "ops v4 switches off: $(tail -1 $O/ops-v4-off.log)"; grep "^FAIL" $O/ops-v4-off.log | head -5
timeout 120 $T --only "dsa" > $O/ops-dsa.log 2>&1; ts "ops dsa: $(tail -1 $O/ops-dsa.log)"; grep "^FAIL" $O/ops-dsa.log | head -5
timeout 120 $SAN --tool memcheck $T --quick --only "v4" > $O/memcheck-v4.log 2>&1; ts "memcheck v4 rc $?: $(grep -E 'ERROR SUMMARY' $O/memcheck-v4.log | tail -1) $(grep -c '^PASS' $O/memcheck-v4.log) pass"
CINFER=$PWD/$C PARITY_ONLY='deepseek_v4|deepseek_v32' OUT=$O/par timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(tail -2 $O/parity.log | tr '\n' ' ')"
wait; ts "made: $(du -sh /tmp/v4 2>&1)"
b() { timeout 100 "$@" --device cuda --prompt-len 16 --gen 64 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-60 | tr '\n' ' '; }
for r in 1 2; do
  for d in 1024 65536; do
    ts "d$d r$r on:  $(b $C bench --model /tmp/v4 --depth $d)"
    ts "d$d r$r off: $(export $OFF; b $C bench --model /tmp/v4 --depth $d)"
    [ $r = 1 ] && ts "d$d r$r SPLIT=0 only: $(CINFER_CUDA_V4_SPLIT=0 b $C bench --model /tmp/v4 --depth $d)"
    [ $r = 1 ] && ts "d$d r$r SELECT=0 SCORE=0 only: $(CINFER_CUDA_DSA_SELECT=0 CINFER_CUDA_DSA_SCORE=0 b $C bench --model /tmp/v4 --depth $d)"
  done
done
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
ts "nsys: ${NSYS:-none}"
if [ -n "$NSYS" ]; then
  for g in 1 33; do
    timeout 150 $NSYS profile --cuda-graph-trace=node -o $O/v4d-g$g -f true $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen $g --depth 65536 > $O/nsys-g$g.log 2>&1
    timeout 100 $NSYS stats -r cuda_gpu_kern_sum -f csv -o $O/kern-g$g $O/v4d-g$g.nsys-rep > /dev/null 2>&1
    ts "nsys g$g rc $?"; rm -f $O/v4d-g$g.nsys-rep $O/v4d-g$g.sqlite
  done
  ls $O
else
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  timeout 200 $NCU --graph-profiling node --cache-control none --clock-control none -k regex:'v4_|dsa_|index' \
    --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen 3 --depth 65536 > $O/ncu-attn.txt 2>&1
  ts "ncu rc $?"
fi
ts end
