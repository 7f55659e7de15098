#!/bin/bash
# (bench/RESULTS.md, ninth session, 2026-12-02: one device call; run from the repository root on the
# device with .gpuz carried, as tests/gpu/stage.sh packs it.) Where the mlx 4-bit Qwen3-30B-A3B-dims
# decode and prefill spend their time: ncu per-kernel summaries of a short decode and of a 512-token
# prefill, and the bench line itself.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
O=${OUT:-/tmp/out}; mkdir -p $O
C=.gpu/cinfer
$C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > /dev/null && echo made
MAKE_Q4_JOBS=16 timeout 200 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > /tmp/mk.log 2>&1; tail -2 /tmp/mk.log; ls /tmp/q30pair
M=/tmp/q30pair/mlx4
for r in 1 2; do
  echo "== mlx4 r$r: $(timeout 60 $C bench --model $M --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done
echo "== bf16: $(timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 200 $NCU --clock-control none --section SpeedOfLight --print-summary per-kernel $C bench --model $M --device cuda --prompt-len 16 --gen 4 > $O/ncu-decode.txt 2>&1; echo "ncu decode rc $?"
timeout 150 $NCU --clock-control none --section SpeedOfLight --print-summary per-kernel -k regex:'widen|grouped|gemm|Kernel|sm90|cutlass' $C bench --model $M --device cuda --prompt-len 512 --gen 1 > $O/ncu-prefill.txt 2>&1; echo "ncu prefill rc $?"
grep -E "^  [a-zA-Z_].*\(|Duration|Invocations" $O/ncu-decode.txt | head -5
