#!/bin/bash
# 2026-12-06 (fortieth session), sixth call: per-line stall samples of the decode q/k/v GEMV
# (qt_dense_kernel<4, 2, 1, 1, 8>, mlx4 Qwen3-30B-A3B dims 2 layers) from a lib with line tables
# (`make gpu-stage-lineinfo LINEINFO=quant_mma`): ncu -o, then --page source --csv.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 2 > $O/make.log 2>&1
MAKE_Q4_JOBS=8 timeout 100 python3 bench/make_q4_pair.py /tmp/q30 2 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1
ts made
timeout 200 $NCU --graph-profiling node --clock-control none --kernel-name-base demangled --kernel-name regex:'qt_dense_kernel<4, 2, 1, 1, 8>' \
  --launch-skip 3 --launch-count 2 --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/rep \
  $C bench --model /tmp/q30pair/mlx4 --device cuda --prompt-len 16 --gen 4 > $O/ncu.log 2>&1
ts "ncu rc $?"; tail -3 $O/ncu.log
timeout 100 $NCU -i /tmp/rep.ncu-rep --page source --csv --print-source cuda > $O/src.csv 2> $O/src.err
ts "source page rc $? $(wc -l < $O/src.csv) lines"; head -3 $O/src.csv | cut -c1-400; head -3 $O/src.err
python3 - $O/src.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
for i, r in enumerate(rows):
    if any('Source' == c for c in r): hdr = i; break
if hdr is None: print("no header"); sys.exit()
h = rows[hdr]; print("columns:", h[:12])
si = h.index('Source')
cand = [j for j, c in enumerate(h) if 'Sampl' in c and 'All' in c] or [j for j, c in enumerate(h) if 'Sampl' in c]
j = cand[0]; print("sorting by", h[j])
body = [r for r in rows[hdr + 1:] if len(r) > j]
def num(x):
    try: return float(x.replace(',', ''))
    except: return 0.0
tot = sum(num(r[j]) for r in body) or 1
for r in sorted(body, key=lambda r: -num(r[j]))[:45]:
    print("%5.1f%%  %s" % (100 * num(r[j]) / tot, r[si].strip()[:110]))
PY
cp /tmp/rep.ncu-rep $O/ 2>/dev/null
ts end
