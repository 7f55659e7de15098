#!/bin/bash
# 2026-12-05 (thirty-fifth session): where the chat's turn-5 prefill call goes (124 new rows after
# 1372 cached, Qwen3-8B dims 12 layers bf16; #19's 5x reuse target wants ~3.8 ms for the whole
# turn). nsys over `cinfer bench --prompt-len 124 --depth 1372 --gen 1 --reps 4`: each forward ends
# with its 4-byte argmax copy, so the GPU trace splits into forwards at those copies; for each
# forward: its span (first kernel start to last end), the time some kernel runs (union), the
# kernels' count, and the largest gaps; then the top kernels of the timed 124-row forwards by time.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
BD=/tmp/cb; mkdir -p $BD
[ -d $BD/qwen3-8b-12l ] || timeout 200 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts "made $(du -sh $BD/qwen3-8b-12l | cut -f1)"
b() { timeout 60 $C bench --model $BD/qwen3-8b-12l --device cuda --prompt-len $1 --depth $2 --gen 2 --reps 5 2>&1 | grep -E "^prefill"; }
ts "$(b 124 1372)"; ts "$(b 1496 0)"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -z "$NSYS" ]; then ts "no nsys on this machine"; ts end; exit 0; fi
ts "nsys: $NSYS"
timeout 150 $NSYS profile -t cuda -o $O/t5 --force-overwrite true $C bench --model $BD/qwen3-8b-12l --device cuda \
  --prompt-len 124 --depth 1372 --gen 1 --reps 4 > $O/nsys-run.log 2>&1
ts "nsys rc $?"; grep -E "^prefill" $O/nsys-run.log
timeout 120 $NSYS stats -q -r cuda_gpu_trace -f csv -o $O/trace $O/t5.nsys-rep > $O/stats.log 2>&1
ts "stats rc $?"; ls $O | head
python3 - "$O" <<'EOF'
import csv, glob, sys, collections
O = sys.argv[1]
f = sorted(glob.glob(O + "/trace*.csv"))
if not f: print("no trace csv"); sys.exit(0)
rows = list(csv.DictReader(open(f[0])))
def col(r, *names):
    for n in names:
        for k in r:
            if k.strip().lower().startswith(n): return r[k]
    return None
ev = []
for r in rows:
    s = float(col(r, "start")); d = float(col(r, "duration")); name = col(r, "name") or ""
    ev.append((s, d, name))
ev.sort()
# forwards: split after each small device-to-host copy (the argmax)
fw, cur = [], []
for s, d, name in ev:
    cur.append((s, d, name))
    if "DtoH" in name or "Device-to-Host" in name or "[CUDA memcpy Device-to-Host]" in name:
        fw.append(cur); cur = []
print(f"{len(fw)} forwards ({len(ev)} GPU events)")
top = collections.Counter(); cnt = collections.Counter()
for i, k in enumerate(fw):
    ks = [e for e in k if "memcpy" not in e[2].lower() and "memset" not in e[2].lower()]
    if not ks: continue
    t0 = ks[0][0]; t1 = max(s + d for s, d, _ in ks)
    busy, end = 0.0, t0
    gaps = []
    for s, d, _ in ks:
        if s > end: gaps.append((s - end, s - t0)); busy += d
        else: busy += max(0.0, s + d - end)
        end = max(end, s + d)
    gaps.sort(reverse=True)
    print(f"forward {i}: {len(ks)} kernels, span {(t1 - t0) / 1e3:.1f} us, busy {busy / 1e3:.1f} us, idle {(t1 - t0 - busy) / 1e3:.1f} us; "
          f"largest gaps (us at us): {[(round(g / 1e3, 1), round(a / 1e3)) for g, a in gaps[:6]]}")
    if i > 0 and i % 3 == 0:   # forwards: warm-up prompt, warm-up step, then (depth, prompt, step) a rep
        for s, d, name in ks:
            top[name[:90]] += d; cnt[name[:90]] += 1
print("124-row forwards, kernels by total time (us, count):")
for name, t in top.most_common(25):
    print(f"  {t / 1e3:9.1f} {cnt[name]:5d}  {name}")
EOF
ts end
