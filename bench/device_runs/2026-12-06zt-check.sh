#!/bin/bash
# 2026-12-06 (forty-fifth session): (1) the GPU check still owed from the forty-fourth session (b0a94e6:
# qt_stage's fallback sums in the float4 form's order; test_cuda_ops "cuda q" failed 18 on the H100
# before it), the fused routing op and the mlx parity; (2) on the box's Xeon (AMX-INT8): the tests of
# 765f281 (amx_mlx_prep by 16-token lines) and 5d79a2c (the one-token kernel's params copy,
# test_determinism's test_amx_mlx_ptiles; staged at 2af3758: 2-3 tokens through it too), and the one-token decode with the copy and without it
# (CINFER_CPU_MLX_PTILES=0) beside --int16-act, 1 and 16 threads, one round (the session's device time was short).
# .gpuz holds cinfer, libcinfer_cuda.so, test_cuda_ops and the CPU tests test_determinism, test_parity,
# test_quant (built on the development VM; staged by hand without bench_* / batch / paged / snapshot).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1   # the reply keeps only the output's tail
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; head -2 .gpu/MANIFEST
for f in "cuda q" norm_matmul; do
  lg="$O/ops-${f// /_}.log"
  CINFER_CUDA_QT_USUM=1 timeout 90 $T --only "$f" > "$lg" 2>&1; echo "usum=1 ops '$f' rc=$?: $(grep -E 'passed' "$lg" | tail -1)"; grep -E "^FAIL" "$lg" | head -4
done
ts ops
timeout 200 $T --only "moe_norm_experts" > $O/ops2.log 2>&1; echo "ops moe_norm_experts rc=$?: $(grep -E 'passed' $O/ops2.log | tail -1)"; grep -E "^FAIL" $O/ops2.log | head -4
PARITY_ONLY='mlx_' CINFER=$C timeout 120 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "gpu parity (mlx_) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts gpu-done
timeout 120 .gpu/tests/test_determinism > $O/det.log 2>&1; echo "test_determinism rc=$?: $(grep -cE '^PASS' $O/det.log) PASS, $(grep -cE '^FAIL' $O/det.log) FAIL"; grep -E "^FAIL|NOTE|ptiles" $O/det.log | head -8
CINFER_FIXTURE=mlx_ timeout 180 .gpu/tests/test_parity > $O/cpar.log 2>&1; echo "cpu parity mlx_ rc=$?: $(grep -cE '^PASS parity' $O/cpar.log) PASS, $(grep -cE '^FAIL' $O/cpar.log) FAIL"; grep -E "^FAIL" $O/cpar.log | head -6
ts cpu-tests
M=/tmp/q06; $C make-random --config bench/qwen3-0.6b.config.json --out $M --dtype bf16 --seed 1 > /dev/null 2>&1
python3 bench/make_q4_pair.py $M 28 /tmp/q06-q4 /nonexistent > /dev/null 2>&1; ls /tmp/q06-q4/mlx4 | head -2
ts model
for r in 1; do for th in 1 16; do
  for mode in int16 ptiles transposes; do
    case $mode in int16) a=--int16-act; e=;; ptiles) a=--mlx-amx; e=;; transposes) a=--mlx-amx; e=CINFER_CPU_MLX_PTILES=0;; esac
    echo "round $r threads $th $mode: $(env $e timeout 60 $C bench --model /tmp/q06-q4/mlx4 --prompt-len 128 --gen 64 --threads $th $a 2>&1 | grep -E 'backend|prefill  |decode  ' | sed -E 's/.*backend ([^)]*)\).*/\1/' | tr '\n' ' ')"
  done
done; done
echo "batch 2, one thread, --mlx-amx: $(timeout 60 $C bench --model /tmp/q06-q4/mlx4 --prompt-len 8 --gen 64 --batch 2 --threads 1 --mlx-amx 2>&1 | grep -E 'decode batch|gain' | tr '\n' ' ')"
ts end
