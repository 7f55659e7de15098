# 2026-12-03 (seventeenth session), the last call: the whole GPU suite on the session's code (V4:
# hc_mix_pre, norm-fused products, head_norm_rope, the clamped SwiGLU in the GEMV's launch; the
# server: a preempted request's generated ids replayed as decode steps on the device), then
# tests/cli/serve_paged.sh on the device 8 times more (its "4 growing requests" check failed 1 run
# in ~4 before the replay), V4-Flash dims 4 layers decode after 512 (2 rounds), and ncu's detailed
# sections of one mxfp4 experts' gate+up and one fp8 dense GEMV launch (why they stream at 0.5-1.5
# TB/s: for the next session).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( nice -n 5 timeout 300 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
OUT=$O/suite timeout 330 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -14 $O/suite.txt
for i in 1 2 3 4 5 6 7 8; do CINFER=$PWD/$C SERVE_DEVICE=cuda timeout 60 bash tests/cli/serve_paged.sh > $O/sp$i.log 2>&1; echo "serve_paged $i: $(grep -c '^PASS' $O/sp$i.log) pass $(grep -c '^FAIL' $O/sp$i.log) fail"; done | tee $O/serve_paged_loop.txt
grep -h '^FAIL' -A3 $O/sp*.log | head -10
wait; ts "made v4: $(du -sh /tmp/v4 | cut -f1)"
for r in 1 2; do timeout 60 $C bench --model /tmp/v4 --device cuda --prompt-len 512 --gen 64 > $O/v4-bench$r.log 2>&1; ts "v4 r$r: $(grep -E '^decode' $O/v4-bench$r.log | sed 's/  */ /g' | tr '\n' '|')"; done
timeout 150 $NCU --kernel-name regex:'qt_gu_kernel|qt_dense_kernel' --launch-skip 40 --launch-count 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
  $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen 4 > $O/ncu-detail.txt 2>&1
ts "ncu detail rc $?"
ts end
