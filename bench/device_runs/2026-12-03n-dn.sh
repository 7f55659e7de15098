# 2026-12-03 (fifteenth session), call 1 of 2: builds llama.cpp's llama-bench on the device in the
# background (bench/device_runs/lcpp_build.sh, .lcsrc carried with .gpuz) while the GPU checks the
# chunked DeltaNet (deltanet.cu; ops on the default, token-path and chunk-path backends, memcheck,
# racecheck), the one-launch decode convs (shortconv, mamba_conv), the hybrid parity fixtures and
# test_snapshot; then waits for the build. Call 2 (o) runs the benchmarks on the warm machine.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
( nice -n 5 bash bench/device_runs/lcpp_build.sh 545 > $O/lcpp-build.txt 2>&1 ) &
bp=$!
timeout 200 $T --only "cuda deltanet" > $O/ops-dn.log 2>&1
ts "ops deltanet: $(grep -c '^PASS' $O/ops-dn.log) pass, $(grep -c '^FAIL' $O/ops-dn.log) fail"; grep '^FAIL' $O/ops-dn.log | cut -c1-160 | head -8
grep -E 'n=1100|n=300 hk=16' $O/ops-dn.log | cut -c1-150 | head -8
for op in shortconv mamba_conv ssd_scan causal_conv; do timeout 100 $T --only "cuda $op" >> $O/ops-conv.log 2>&1; done
ts "ops convs: $(grep -c '^PASS' $O/ops-conv.log) pass, $(grep -c '^FAIL' $O/ops-conv.log) fail"; grep '^FAIL' $O/ops-conv.log | head -5
timeout 150 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda deltanet" > $O/mc-dn.log 2>&1; ts "memcheck deltanet rc $?"
timeout 100 $SAN --tool memcheck --error-exitcode 99 $T --only "cuda shortconv" > $O/mc-conv.log 2>&1; ts "memcheck shortconv rc $?"
timeout 150 $SAN --tool racecheck --error-exitcode 99 $T --only "cuda deltanet n=130 hk=2 hv=4 dk=32 dv=16 chunk-path" > $O/rc-dn.log 2>&1; ts "racecheck deltanet rc $?"; grep -E "SUMMARY|passed" $O/rc-dn.log | head -3
PARITY_ONLY='qwen3_next|qwen3_5|lfm2|nemotron' CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8; grep 'cuda long' $O/parity.log | cut -c1-150
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_snapshot > $O/snapshot.log 2>&1; ts "test_snapshot on cuda rc $?: $(tail -1 $O/snapshot.log)"
wait $bp; ts "build: $(cat $O/lcpp-build.txt | tr '\n' ' ')"
ts end
