#!/usr/bin/env python3
# ncu_steps.py — per decode step kernel table from two `ncu --print-summary per-kernel` logs of
# `cinfer bench` (the same command with --gen A and --gen B > A; ncu with --graph-profiling node
# and the metrics gpu__time_duration.sum, dram__bytes_read.sum): for every kernel (name and grid)
# the difference of B's and A's totals divided by the decode steps between them (the difference
# of argmax_final_kernel's invocations), sorted by time a step. Times are ncu's: nodes run one
# at a time with caches flushed, so small kernels read long; use it to rank, not to add up.
# Usage: python3 bench/ncu_steps.py ncu-gen1.txt ncu-gen5.txt
import re
import sys

UNIT = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'ns': 1e-3, 'us': 1, 'ms': 1e3, 's': 1e6,
        'nsecond': 1e-3, 'usecond': 1, 'msecond': 1e3}
HEAD = re.compile(r'\s+(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Device \d+, CC [\d.]+, Invocations (\d+)')
METRIC = re.compile(r'\s+(gpu__time_duration.sum|dram__bytes_read.sum)\s+(\S+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)')


def parse(path):
    """kernel 'name gxXgyXgz' -> invocations, total us, total bytes read"""
    table, cur, inv = {}, None, 0
    for line in open(path, errors='replace'):
        m = HEAD.match(line)
        if m:
            name = re.sub(r'^void ', '', m.group(1))
            name = re.sub(r'\(.*$', '', name)
            cur = '%s %sx%sx%s' % (name, m.group(2), m.group(3), m.group(4))
            inv = int(m.group(8))
            row = table.setdefault(cur, {'inv': 0, 'us': 0.0, 'bytes': 0.0})
            row['inv'] += inv
            continue
        m = METRIC.match(line)
        if m and cur:
            avg = float(m.group(5).replace(',', '')) * UNIT[m.group(2)]
            table[cur]['us' if m.group(1).startswith('gpu') else 'bytes'] += avg * inv
    return table


def main():
    a, b = parse(sys.argv[1]), parse(sys.argv[2])
    key = 'argmax_final_kernel 1x1x1'
    steps = b[key]['inv'] - a.get(key, {'inv': 0})['inv']
    rows = []
    for k, rb in b.items():
        ra = a.get(k, {'inv': 0, 'us': 0.0, 'bytes': 0.0})
        calls = rb['inv'] - ra['inv']
        if calls > 0:
            us, nbytes = rb['us'] - ra['us'], rb['bytes'] - ra['bytes']
            rows.append((us / steps, calls / steps, us / calls, nbytes / calls / 1e6, k))
    rows.sort(reverse=True)
    print('steps %d, serialised us a step %.0f, kernels a step %.1f' %
          (steps, sum(r[0] for r in rows), sum(r[1] for r in rows)))
    for per_step, calls, each, mb, k in rows:
        gbs = mb * 1e3 / each if each else 0
        print('%8.1f us/step %6.2f calls %8.2f us each %8.3f MB each %6.0f GB/s  %s' % (per_step, calls, each, mb, gbs, k))


if __name__ == '__main__':
    main()
