# 2026-12-03 (seventeenth session): V4 decode after hc_mix_pre (the mHC mix's parts over many
# blocks, hc_pre summing them) and the norm-fused products of the V4 attention / router: op cases
# against the CPU (hc_mix_pre, every quantized / fp8 / mxfp4 / experts case, also with the
# CINFER_CUDA_QT_UX=2 kernels), every deepseek_v4* / mlx_deepseek_v4* fixture's parity, then
# V4-Flash dims 4 layers (fp8 + FP4) decode after 512 with the knobs (HCMIX=0: the old mix;
# QT_UX=2; QT_MOE_KS 1 / 4), 2 rounds alternating, and the ncu kernel lists again.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( nice -n 5 timeout 300 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
for f in "cuda hc_" "cuda head_norm_rope" "cuda v4" "cuda moe" "cuda q" "cuda matmul"; do timeout 100 $T --only "$f" >> $O/ops.log 2>&1; done
ts "ops: $(grep -c '^PASS' $O/ops.log) pass, $(grep -c '^FAIL' $O/ops.log) fail"; grep '^FAIL' $O/ops.log | head -8; grep 'hc_mix' $O/ops.log | head -8
for f in "mxfp4" "fp8" "cuda moe"; do CINFER_CUDA_QT_UX=2 timeout 100 $T --only "$f" >> $O/ops-ux2.log 2>&1; done
ts "ops UX=2: $(grep -c '^PASS' $O/ops-ux2.log) pass, $(grep -c '^FAIL' $O/ops-ux2.log) fail"; grep '^FAIL' $O/ops-ux2.log | head -5
timeout 100 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "hc_mix" > $O/mc.log 2>&1; ts "memcheck hc_mix rc $? $(tail -1 $O/mc.log)"
PARITY_ONLY='deepseek_v4' CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8
wait; ts "made v4: $(du -sh /tmp/v4 | cut -f1)"
b() { timeout 60 $C bench --model /tmp/v4 --device cuda --prompt-len 512 --gen 64 2>&1 | awk '/^decode +[0-9]/{print $8} /^decode GB/{print $3, $6}' | tr '\n' ' '; }
for r in 1 2; do for s in default CINFER_CUDA_HCMIX=0 CINFER_CUDA_QT_UX=2 CINFER_CUDA_QT_MOE_KS=4 CINFER_CUDA_QT_MOE_KS=1; do
  echo "r$r $s: $( [ $s = default ] || export "$s"; b )"
done; done | tee $O/bench.txt
for g in 1 5; do
  timeout 100 $NCU --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/v4 --device cuda --prompt-len 16 --gen $g > $O/ncu-v4-g$g.txt 2>&1
  ts "ncu g$g rc $?"
done
ts end
