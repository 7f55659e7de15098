# 2026-12-03 (sixteenth session): where a DeepSeek V4-Flash-dims decode step goes (issue #18: decode
# at 10-12% of the copy bandwidth). V4-Flash dims, 4 of 43 layers in the real pattern (sliding,
# HCA, CSA, HCA; 3 hash-routed MoE layers and one top-k), fp8 + FP4 experts: decode tok/s, then
# ncu kernel lists (time and DRAM bytes a kernel, graph nodes profiled one at a time) of a run
# with 1 and with 5 generated tokens (their difference: 4 decode steps). Then the one-token GEMV
# shape of <= 2048 columns (CINFER_CUDA_GEMV1=2) against the default on LFM2-8B-A1B (8 layers) and
# Qwen3-30B-A3B dims (4 layers), 2 rounds alternating.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
timeout 300 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1
ts "made v4 rc $?: $(du -sh /tmp/v4 | cut -f1)"
for r in 1 2; do timeout 90 $C bench --model /tmp/v4 --device cuda --prompt-len 512 --gen 64 > $O/v4-bench$r.log 2>&1; ts "v4 r$r: $(grep -E '^prefill|^decode' $O/v4-bench$r.log | sed 's/  */ /g' | tr '\n' '|')"; done
for g in 1 5; do
  timeout 240 $NCU --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --print-summary per-kernel $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen $g > $O/ncu-v4-g$g.txt 2>&1
  ts "ncu g$g rc $?"
done
rm -rf /tmp/v4
timeout 60 $C make-random --config bench/lfm2-8b-a1b.config.json --out /tmp/lfm2 --dtype bf16 --seed 1 --layers 8 > /dev/null
timeout 60 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 4 > /dev/null
b() { timeout 40 $C bench --model /tmp/$1 --device cuda --prompt-len 512 --gen 256 2>&1 | awk '/^decode +[0-9]/{print $8} /^decode GB/{print $6}' | tr '\n' ' '; }
for r in 1 2; do for m in lfm2 q30; do for s in default CINFER_CUDA_GEMV1=2; do
  echo "r$r $m $s: $( [ $s = default ] || export "$s"; b $m )"
done; done; done | tee $O/gemv.txt
ts end
