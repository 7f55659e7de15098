# 2026-12-03 (fifteenth session), after call o on the warm machine: an ncu kernel list of the
# Qwen3.5 dims pp4096 with the chunked DeltaNet, then the GPU suite (tests/gpu/run.sh).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 60 $NCU --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench \
  --model /tmp/cinfer-bench/qwen3.5-35b-a3b-4l --device cuda --prompt-len 4096 --gen 1 > $O/ncu-pp-q35.txt 2>&1; ts "ncu rc $?"
OUT=$O timeout 420 bash tests/gpu/run.sh 2>&1 | tail -16; grep '^FAIL' $O/logs/*.log 2>/dev/null | head -10; ts end
