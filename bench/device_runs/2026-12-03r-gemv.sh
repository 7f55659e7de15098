# 2026-12-03 (fifteenth session): confirms call q's lead, the one-token GEMVs of <= 2048 columns
# with two rows per warp (CINFER_CUDA_GEMV1=2: RPW 2, U 2; =4: RPW 2, U 1) against the default
# rules, 4 rounds alternating, on LFM2-8B-A1B dims 8 layers and Qwen3.5-35B-A3B dims 4 layers
# (both hidden 2048), decode 256 after a 1024-token prompt. One compact line per run.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
timeout 60 $C make-random --config bench/lfm2-8b-a1b.config.json --out /tmp/lfm2 --dtype bf16 --seed 1 --layers 8 > /dev/null
timeout 60 $C make-random --config bench/qwen3.5-35b-a3b.config.json --out /tmp/q35 --dtype bf16 --seed 1 --layers 4 > /dev/null
b() { timeout 40 $C bench --model /tmp/$1 --device cuda --prompt-len 1024 --gen 256 2>&1 | awk '/^decode +[0-9]/{print $8} /^decode GB/{print $6}' | tr '\n' ' '; }
for r in 1 2 3 4; do for m in lfm2 q35; do for s in default CINFER_CUDA_GEMV1=2 CINFER_CUDA_GEMV1=4; do
  echo "r$r $m $s: $( [ $s = default ] || export "$s"; b $m )"
done; done; done | tee $O/gemv.txt
ts end
