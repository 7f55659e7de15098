#!/usr/bin/env python3
"""ncu_src.py — summarises ncu's source page of one kernel (`ncu -i REP --page source
--print-source sass --csv`): total stall samples, the sum of each per-reason column, and the SASS
lines that hold the most samples, each with its own leading reasons. Usage: ncu_src.py SRC.csv [TOP]"""
import csv, sys

def num(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0

def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    h = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r) and any("Address" in c for c in r)), None)
    if h is None:
        print("ncu_src: no header with Address and Source in", path)
        print("".join(",".join(r)[:200] + "\n" for r in rows[:10]))
        return 1
    head, body = rows[h], [r for r in rows[h + 1:] if len(r) == len(rows[h])]
    print("columns:", " | ".join(head))
    col = lambda *keys: next((i for i, c in enumerate(head) if all(k in c for k in keys)), None)
    isrc, iadr = head.index("Source") if "Source" in head else col("Source"), col("Address")
    iall, inot, iexe = col("Warp Stall Sampling (All"), col("Warp Stall Sampling (Not"), col("Instructions Executed")
    if iall is None:
        print("ncu_src: no stall sampling column")
        return 1
    tot = sum(num(r[iall]) for r in body) or 1.0
    print(f"instructions {len(body)}, samples {tot:.0f}" +
          (f", not issued {sum(num(r[inot]) for r in body):.0f}" if inot is not None else "") +
          (f", executed {sum(num(r[iexe]) for r in body):.0f}" if iexe is not None else ""))
    skip = {iall, inot, iexe, isrc, iadr}
    reasons = [i for i, c in enumerate(head) if i not in skip and ("stall" in c.lower() or "pcsamp" in c.lower())
               and any(num(r[i]) for r in body)]
    sums = sorted(((sum(num(r[i]) for r in body), head[i]) for i in reasons), reverse=True)
    for s, n in sums[:16]:
        print(f"  reason {100 * s / tot:5.1f}%  {n}")
    print(f"top {top} lines by samples:")
    for r in sorted(body, key=lambda r: -num(r[iall]))[:top]:
        lead = sorted(((num(r[i]), head[i]) for i in reasons), reverse=True)[:2]
        why = "; ".join(f"{n.split('(')[0].strip()[-28:]} {v:.0f}" for v, n in lead if v)
        ex = f" exe {num(r[iexe]):.0f}" if iexe is not None else ""
        print(f"{100 * num(r[iall]) / tot:5.1f}% {r[iadr]:>6}{ex}  {r[isrc].strip()[:70]}  [{why}]")
    return 0

if __name__ == "__main__":
    sys.exit(main())
