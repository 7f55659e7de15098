#!/bin/bash
# 2026-12-06 (forty-fourth session): (1) the check 2026-12-06zr-check.sh was to make (b0a94e6:
# qt_stage's fallback sums in the float4 form's order; test_cuda_ops "cuda q" failed 18 on the H100
# before it), then the fused routing op and the mlx parity; (2) on the box's Xeon (AMX-INT8):
# amx_mlx.c's tiles against its new VNNI form (1eb8d8e; test_determinism compares their bits,
# test_parity runs the MLX fixtures both ways) and their prefill / decode speed beside --int16-act.
# .gpuz here holds cinfer, libcinfer_cuda.so, test_cuda_ops and the CPU tests test_determinism,
# test_parity, test_quant (built on the development VM, staged by hand: no bench_* / batch / paged).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
# everything printed also into $OUT/run.log (the reply keeps only the output's last 12,000 characters: the
# run of 17:58 UTC lost its "cuda q" line that way, the per-op logs being overwritten by the next op)
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
for f in "cuda q" norm_matmul; do
  lg="$O/ops-${f// /_}.log"
  CINFER_CUDA_QT_USUM=1 timeout 90 $T --only "$f" > "$lg" 2>&1; echo "usum=1 ops '$f' rc=$?: $(grep -E 'passed' "$lg" | tail -1)"; grep -E "^FAIL" "$lg" | head -4
done
ts ops
timeout 60 $T --only "moe_norm_experts" > $O/ops2.log 2>&1; echo "ops moe_norm_experts rc=$?: $(grep -E 'passed' $O/ops2.log | tail -1)"; grep -E "^FAIL" $O/ops2.log | head -4
ts moe
PARITY_ONLY='mlx_' CINFER=$C timeout 120 bash tests/gpu/parity.sh > $O/parity.log 2>&1; echo "gpu parity (mlx_) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts gpu-done
# (2) the Xeon
timeout 120 .gpu/tests/test_determinism > $O/det.log 2>&1; echo "test_determinism rc=$?: $(grep -cE '^PASS' $O/det.log) PASS, $(grep -cE '^FAIL' $O/det.log) FAIL"; grep -E "^FAIL|NOTE|amx-mlx" $O/det.log | head -8
CINFER_FIXTURE=mlx_ timeout 180 .gpu/tests/test_parity > $O/cpar.log 2>&1; echo "cpu parity mlx_ rc=$?: $(grep -cE '^PASS parity' $O/cpar.log) PASS, $(grep -cE '^FAIL' $O/cpar.log) FAIL"; grep -E "^FAIL" $O/cpar.log | head -6; grep -E "mlx-amx" $O/cpar.log | head -4
ts cpu-tests
for th in 1 16; do
  timeout 60 .gpu/tests/test_quant --bench-gemm 3072 1024 128 $th 2>&1 | grep bench-gemm
  CINFER_CPU_MLX_TILES=0 timeout 60 .gpu/tests/test_quant --bench-gemm 3072 1024 128 $th 2>&1 | grep "mlx:"
done
ts gemm
M=/tmp/q06; $C make-random --config bench/qwen3-0.6b.config.json --out $M --dtype bf16 --seed 1 > /dev/null 2>&1
python3 bench/make_q4_pair.py $M 28 /tmp/q06-q4 /nonexistent > /dev/null 2>&1; ls /tmp/q06-q4/mlx4 | head -3
ts model
for r in 1 2; do for th in 1 16; do
  for mode in int16 tiles vnni; do
    case $mode in int16) a=--int16-act; e=;; tiles) a=--mlx-amx; e=;; vnni) a=--mlx-amx; e=CINFER_CPU_MLX_TILES=0;; esac
    for P in 128 512; do
      echo "round $r threads $th $mode P=$P: $(env $e timeout 60 $C bench --model /tmp/q06-q4/mlx4 --prompt-len $P --gen 16 --threads $th $a 2>&1 | grep -E 'backend|prefill|decode' | sed -E 's/.*backend ([^)]*)\).*/\1/' | tr '\n' ' ')"
    done
  done
done; done
ts end
