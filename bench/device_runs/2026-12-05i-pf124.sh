#!/bin/bash
# 2026-12-05 (thirty-first session), second call: where the prefill call of a reused chat turn goes
# (issue #19: turn 5 of the chat is 124 new rows after 1372 cached ones, ~4 ms of its 5.5 ms TTFT).
# Qwen3-8B dims, 12 layers, bf16, make-random --seed 1 here. `cinfer bench` prefill at the chat's
# shapes and fresh, two rounds; ncu's kernel list (durations, grids) of `--prompt-len 124 --depth
# 1372 --gen 1 --no-graphs` (split per forward afterwards by its embed launches); torch's bf16
# GEMMs at the same shapes (124 rows; cuBLAS through torch) for what the products could take.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start
timeout 200 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts "made $(du -sh /tmp/q8 | cut -f1)"
b() { timeout 60 $C bench --model /tmp/q8 --device cuda --prompt-len $1 --depth $2 --gen 4 --reps 3 2>&1 | grep -E "^prefill" | sed 's/  */ /g' | cut -c1-80; }
for r in 1 2; do
  for s in "124 1372" "124 0" "216 1280" "1496 0" "1000 0"; do ts "r$r $s: $(b $s)"; done
done
timeout 200 $NCU --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum $C bench --model /tmp/q8 --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 --no-graphs > $O/ncu124.csv 2> $O/ncu124.err
ts "ncu rc $? $(wc -l < $O/ncu124.csv) lines"
python3 - > $O/torch.txt 2>&1 <<'PY'
import torch, time
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
for n in (124, 216, 1496):
    for (k, m) in ((4096, 4096), (4096, 1024), (4096, 12288), (12288, 4096), (4096, 6144), (4096, 24576)):
        a = torch.randn(n, k, device='cuda', dtype=torch.bfloat16); w = torch.randn(m, k, device='cuda', dtype=torch.bfloat16)
        for _ in range(3): y = a @ w.t()
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(50): y = a @ w.t()
        torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 50
        print(f"n={n} k={k} m={m}: {dt*1e6:.1f} us, {m*k*2/dt/1e12:.2f} TB/s, {2*n*m*k/dt/1e12:.0f} TFLOPS")
PY
cat $O/torch.txt
ts end
