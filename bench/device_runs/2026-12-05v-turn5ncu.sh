#!/bin/bash
# 2026-12-05 (thirty-fifth session): the chat's turn-5 prefill call (124 new rows after 1372 cached,
# Qwen3-8B dims 12 layers bf16) kernel by kernel (the machine has no nsys): ncu's duration of every
# kernel of `cinfer bench --prompt-len 124 --depth 1372 --gen 1 --reps 1`, kernels one at a time
# at the card's clocks with warm caches; forwards split at argmax_final_kernel (each forward's last).
# The timed 124-row forward's kernel sum against its measured wall (the bench line) says how much
# of the call the GPU is idle; then its kernels grouped by name.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
BD=/tmp/cb; mkdir -p $BD
[ -d $BD/qwen3-8b-12l ] || timeout 200 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 240 $NCU --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv \
  $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 > $O/ncu.csv 2> $O/ncu.err
ts "ncu rc $? $(wc -l < $O/ncu.csv) lines"; grep -E "^prefill" $O/ncu.csv
python3 - "$O/ncu.csv" <<'EOF'
import csv, sys, collections, io
txt = open(sys.argv[1]).read()
lines = [l for l in txt.splitlines() if l.startswith('"')]
rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
ks = []
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", "")); u = r.get("Metric Unit", "")
    us = v / 1e3 if u == "nsecond" else v if u == "usecond" else v * 1e3 if u == "msecond" else v
    ks.append((r["Kernel Name"], us))
fw, cur = [], []
for k in ks:
    cur.append(k)
    if "argmax_final" in k[0]: fw.append(cur); cur = []
print(f"{len(ks)} kernels, {len(fw)} forwards")
for i, f in enumerate(fw): print(f"forward {i}: {len(f)} kernels, sum {sum(u for _, u in f):.1f} us")
if len(fw) >= 4:
    f = fw[3]   # warm-up prompt, warm-up step, depth, then the timed prompt
    g = collections.defaultdict(lambda: [0.0, 0])
    for n, u in f:
        key = n.split("(")[0][:100]; g[key][0] += u; g[key][1] += 1
    print("timed 124-row forward by kernel (us, count):")
    for n, (u, c) in sorted(g.items(), key=lambda x: -x[1][0])[:30]: print(f"  {u:8.1f} {c:4d}  {n}")
EOF
ts end
