# 2026-12-03 (sixteenth session): the first V4 decode fixes (hc_pre's maps built by a warp in shared
# memory; matmul_groups of fp8 / MLX views in one tensor-core launch; mxfp4 / FP4 E2M1 weights on
# the tensor-core GEMVs, dense and experts) and the two-rows-a-warp GEMV rule for 1025..2048
# columns: op cases against the CPU (hc, groups, matmul, every quantized case), memcheck over them,
# every deepseek_v4* / mlx_deepseek_v4* fixture and the hidden-2048 families' parity, then V4-Flash
# dims 4 layers decode (before: 377 tok/s, call s) and the ncu kernel list again.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
( timeout 300 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make.log 2>&1 ) &
for f in "cuda hc_" "cuda matmul" "cuda q" "cuda v4" "cuda moe"; do timeout 150 $T --only "$f" >> $O/ops.log 2>&1; done
ts "ops: $(grep -c '^PASS' $O/ops.log) pass, $(grep -c '^FAIL' $O/ops.log) fail"; grep '^FAIL' $O/ops.log | head -8
timeout 150 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda matmul_groups" > $O/mc.log 2>&1; ts "memcheck groups rc $? $(tail -1 $O/mc.log)"
timeout 200 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "mxfp4" > $O/mc3.log 2>&1; ts "memcheck mxfp4 rc $? $(tail -1 $O/mc3.log)"
PARITY_ONLY='deepseek_v4|mlx_' CINFER=$C timeout 240 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8
wait; ts "made v4: $(du -sh /tmp/v4 | cut -f1)"
for r in 1 2; do timeout 90 $C bench --model /tmp/v4 --device cuda --prompt-len 512 --gen 64 > $O/v4-bench$r.log 2>&1; ts "v4 r$r: $(grep -E '^decode' $O/v4-bench$r.log | sed 's/  */ /g' | tr '\n' '|')"; done
CINFER_CUDA_QMMA=0 timeout 90 $C bench --model /tmp/v4 --device cuda --prompt-len 512 --gen 64 > $O/v4-bench-qmma0.log 2>&1; ts "v4 QMMA=0: $(grep -E "^decode" $O/v4-bench-qmma0.log | sed "s/  */ /g" | tr "\n" "|")"
ts end
