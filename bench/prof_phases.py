#!/usr/bin/env python3
"""prof_phases.py FILE [--step N] — reads what a CINFER_CUDA_PROF build wrote to $CINFER_CUDA_PROF_OUT
(src/backend/cuda/prof.cuh: one record per block of each marked kernel: two %globaltimer stamps and
clock64 at its marks) and prints, per kernel kind and shape, the launches' median span (first block's
start to last block's end), a block's median time, and each phase's median share of it; then the
launches of one decode step in order with the gaps between them (where unmarked kernels ran)."""
import signal, struct, sys, statistics as st

KINDS = {1: "qt dense", 2: "qt gate+up", 3: "qt down", 4: "moe fused"}
# the phase that ends at each mark slot (prof.cuh's clk[i]; slot 0 is the kernel's start), "end" last
PH = {1: {1: "setup", 2: "pdl wait", 3: "norm pass", 4: "pairs", 5: "group sums", 6: "tile (warp 0)", 7: "reduce"},
      2: {1: "pdl wait", 2: "ids+ptrs", 3: "loads issued", 4: "norm pass", 5: "pairs", 6: "group sums",
          7: "tile (warp 0)", 8: "reduce"},
      3: {1: "pdl wait", 2: "ids+ptrs", 3: "loads issued", 4: "norm pass", 5: "pairs", 6: "group sums",
          7: "items (warp 0)", 8: "reduce"},
      4: {1: "pre-pdl loads", 2: "pdl wait", 3: "x + norm", 4: "router (warp 0)", 5: "barrier 1",
          6: "route: logits + scores", 7: "route: ranks", 8: "route: weights", 9: "route: table",
          10: "gate+up (warp 0)", 11: "down batch + barrier 2", 12: "h to smem", 13: "down (warp 0)"}}
NM = 13
FMT = "<8I2Q%dQQ" % NM
SZ = struct.calcsize(FMT)

def main():
    path = sys.argv[1]
    step = int(sys.argv[sys.argv.index("--step") + 1]) if "--step" in sys.argv else 4
    data = open(path, "rb").read()
    n = struct.unpack_from("<I", data, 0)[0]
    recs = [struct.unpack_from(FMT, data, 4 + i * SZ) for i in range((len(data) - 4) // SZ)]
    print(f"{n} records written, {len(recs)} read")
    groups = {}
    for r in recs:
        kind, K, rows, ks, block, grid, smid, marks, g0, g1 = r[:10]
        clk = list(r[10:10 + NM]); ce = r[10 + NM]
        groups.setdefault((kind, K, rows, ks, grid), []).append((g0, g1, clk, ce))
    launches = []
    for key, rs in groups.items():
        rs.sort(key=lambda x: x[0])
        cur = [rs[0]]
        for x in rs[1:]:
            if x[0] - cur[0][0] > 20000:
                launches.append((key, cur)); cur = [x]
            else:
                cur.append(x)
        launches.append((key, cur))
    print("\nper kernel shape (ns; medians over launches / blocks; phases as a block's thread 0 saw them)")
    bykey = {}
    for key, bl in launches: bykey.setdefault(key, []).append(bl)
    for key in sorted(bykey, key=lambda k: -len(bykey[k])):
        ls = bykey[key]
        kind, K, rows, ks, grid = key
        spans = [max(b[1] for b in bl) - min(b[0] for b in bl) for bl in ls]
        skew = [max(b[0] for b in bl) - min(b[0] for b in bl) for bl in ls]
        blocks = [b for bl in ls for b in bl]
        dur = [b[1] - b[0] for b in blocks]
        ph = {}
        for g0, g1, clk, ce in blocks:
            nspc = (g1 - g0) / max(1, ce - clk[0])
            pts = [(i, c) for i, c in enumerate(clk) if c] + [(NM, ce)]
            for (i0, c0), (i1, c1) in zip(pts, pts[1:]):
                ph.setdefault(i1, []).append((c1 - c0) * nspc)
        names = dict(PH.get(kind, {})); names.setdefault(NM, "write")
        phs = "  ".join(f"{names.get(i, i)} {st.median(ph[i]):.0f}" for i in sorted(ph))
        print(f"{KINDS.get(kind, kind)} K={K} rows={rows} ks={ks} grid={grid}: {len(ls)} launches, span {st.median(spans):.0f}"
              f" (start skew {st.median(skew):.0f}), block {st.median(dur):.0f} | {phs}")
    # one step: launches in start order; a step = the launches between the step-th and step+1-th head
    allL = sorted(((min(b[0] for b in bl), max(b[1] for b in bl), key) for key, bl in launches))
    heads = [i for i, l in enumerate(allL) if l[2][2] > 100000]   # the vocabulary head: the most rows
    if len(heads) > step + 1:
        a, b = heads[step] + 1, heads[step + 1] + 1
        print(f"\nstep {step}: launches {a}..{b - 1}, from {allL[a][0] - allL[a - 1][1]} ns after the head before")
        t0 = allL[a][0]; prev = allL[a - 1][1]
        for s0, s1, key in allL[a:b]:
            print(f"  +{s0 - t0:7d}  gap {s0 - prev:6d}  span {s1 - s0:6d}  {KINDS.get(key[0])} K={key[1]} rows={key[2]}")
            prev = s1
        print(f"  step {allL[b - 1][1] - allL[a - 1][1]} ns head to head")

signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # output cut short by `| head`: end quietly
main()
