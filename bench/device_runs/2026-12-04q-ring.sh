#!/bin/bash
# 2026-12-04 (twenty-second session), third call: the block-per-token route kernel and the code
# ring of the quantized tensor-core GEMVs (quant_mma.cuh, CINFER_CUDA_QT_RING). All ops (ring on),
# the quantized ops with the direct loads and ring = direct byte for byte (run.sh's ops-qt step),
# then Qwen3-30B-A3B dims 4 layers bf16 / mlx4 decode with the ring on and off alternating, and
# the per-step kernel table of the mlx4 step (ncu, caches and clocks as they are).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 4 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 timeout 150 python3 bench/make_q4_pair.py /tmp/q30 4 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1 ) &
timeout 150 $T > $O/ops.log 2>&1; ts "ops rc $? $(grep '^# ' $O/ops.log | tail -1)"; grep "^FAIL" $O/ops.log | head -8
for o in 'cuda q' 'moe_experts q'; do CINFER_CUDA_QT_RING=0 timeout 60 $T --quick --only "$o" > $O/ops-direct.log 2>&1; ts "ring=0 $o rc $? $(grep '^# ' $O/ops-direct.log | tail -1)"; grep "^FAIL" $O/ops-direct.log | head -4; done
for f in mlx_qwen3_moe_4bit mlx_qwen3_8bit_tied mlx_llama_mxfp4 deepseek_v4_fp8 mlx_deepseek_v4_4bit mlx_qwen3_5_moe_4bit; do
  for r in 0 1; do CINFER_CUDA_QT_RING=$r $C logits --model tests/fixtures/$f --tokens 1,5,9,22,7,3,11,40 --out /tmp/qt_ring$r.f32 --step --device cuda > /dev/null 2>&1; done
  cmp -s /tmp/qt_ring0.f32 /tmp/qt_ring1.f32 && ts "same bits ring/direct: $f" || ts "DIFFERENT ring/direct: $f"
done
PARITY_ONLY='mlx|fp8|qwen3_moe|deepseek_v3' CINFER=$PWD/$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1; ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
wait; ts "made $(tail -1 $O/make-q4.log)"
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len 512 --gen 64 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
for r in 1 2 3; do
  ts "mlx4 ring r$r: $(b /tmp/q30pair/mlx4)"
  ts "mlx4 direct r$r: $(CINFER_CUDA_QT_RING=0 b /tmp/q30pair/mlx4)"
done
ts "bf16: $(b /tmp/q30)"
for g in 1 5; do
  timeout 120 $NCU --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen $g > $O/ncu-g$g.txt 2>&1
done
python3 bench/ncu_steps.py $O/ncu-g1.txt $O/ncu-g5.txt 2>&1 | head -16
rm -f $O/ncu-g*.txt
ts end
