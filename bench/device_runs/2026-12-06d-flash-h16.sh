#!/bin/bash
# 2026-12-06 (thirty-seventh session): the prefill attention's f16 form (CINFER_CUDA_FLASH_H16=3|4:
# the launch's keys rounded to f16 once by kv_half_kernel, then 3 or 4 f16 stages copied as they
# are, no per-tile f32 stage or conversion) against the default, for the chat's turn 5 (124 new
# rows after 1372 cached keys, Qwen3-8B dims 12 layers bf16). (1) the attention ops on the CPU's
# bounds with the new form; (2) its logits byte for byte against the default's (the same f16
# operands in the same order: the same bits wanted); (3) the prefill call, forms alternating, 3
# rounds; (4) ncu's duration of every attention kernel of the timed 124-row forward, each form,
# and the sections of one launch of each.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for sw in 'CINFER_CUDA_FLASH_H16=3' 'CINFER_CUDA_FLASH_H16=4 CINFER_CUDA_FLASH_SPLIT=0' 'CINFER_CUDA_FLASH_H16=4'; do
  for o in 'cuda attention' 'cuda rope_attend'; do env $sw timeout 60 $T --quick --only "$o" 2>&1 | tail -1 | sed "s/^/ops $sw $o: /"; done
done
CINFER_TEST_DEVICE=cuda timeout 90 .gpu/tests/test_paged 2>&1 | grep -E "PASS|FAIL" | sed "s/^/paged (copy_2d): /"
ts "ops done"
BD=/tmp/cb; mkdir -p $BD
[ -d $BD/qwen3-8b-12l ] || timeout 200 $C make-random --config bench/qwen3-8b.config.json --out $BD/qwen3-8b-12l --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
ts made
M=$BD/qwen3-8b-12l
IDS=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(150000)) for _ in range(1496)))")
for h in 0 3 4; do CINFER_CUDA_FLASH_H16=$h timeout 60 $C logits --model $M --device cuda --tokens $IDS --out $O/logits_h$h.bin > /dev/null 2>$O/logits_h$h.err; echo "logits h16=$h rc $?"; done
cmp $O/logits_h0.bin $O/logits_h3.bin && echo "logits h16=3 == default (byte for byte)"
cmp $O/logits_h0.bin $O/logits_h4.bin && echo "logits h16=4 == default (byte for byte)"
ts "logits done"
run() {   # run ENV=VALUE [bench shape args; default the turn-5 shape]
  local e=$1; shift; local shape=${*:---prompt-len 124 --depth 1372}
  env $e $C bench --model $M --device cuda $shape --gen 1 --reps 5 2>&1 | grep -E "^reps" | sed "s/^/$e $shape: /"; }
for r in 1 2 3; do
  run X=default
  run CINFER_CUDA_FLASH_H16=3
  run CINFER_CUDA_FLASH_H16=4
  run CINFER_CUDA_FLASH_BK=16
  run CINFER_CUDA_FLASH_SEGMIN=64
done
run X=default --prompt-len 1496 --depth 0
run CINFER_CUDA_FLASH_H16=3 --prompt-len 1496 --depth 0
run X=default --prompt-len 344 --depth 8192
run CINFER_CUDA_FLASH_H16=3 --prompt-len 344 --depth 8192
ts "bench done"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for h in 0 3; do
  CINFER_CUDA_FLASH_H16=$h timeout 100 $NCU --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv \
    -k regex:"attn_flash_pipe|fp_combine|kv_half" $C bench --model $M --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 > $O/ncu_t_h$h.csv 2>/dev/null
  echo "ncu h16=$h: $(grep -c gpu__time $O/ncu_t_h$h.csv) kernels"
  python3 - $O/ncu_t_h$h.csv <<'PY'
import csv, io, sys, collections
rows = list(csv.DictReader(io.StringIO("\n".join(l for l in open(sys.argv[1]).read().splitlines() if l.startswith('"')))))
ks = [(r["Kernel Name"].split("(")[0][:40], r.get("Grid Size", ""), float(r["Metric Value"].replace(",", "")), r["Metric Unit"]) for r in rows]
g = collections.defaultdict(list)
for n, gs, v, u in ks: g[(n, gs)].append(v / 1e3 if u == "nsecond" else v)
for (n, gs), v in g.items(): print(f"  {n} grid {gs}: {len(v)} launches, median {sorted(v)[len(v)//2]:.1f} us")
PY
done
CINFER_CUDA_FLASH_H16=3 timeout 120 $NCU --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section SourceCounters -k regex:attn_flash_pipe --launch-skip 30 --launch-count 1 \
  $C bench --model $M --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 > $O/ncu_h3.txt 2>&1
timeout 120 $NCU --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section SourceCounters -k regex:attn_flash_pipe --launch-skip 30 --launch-count 1 \
  $C bench --model $M --device cuda --prompt-len 124 --depth 1372 --gen 1 --reps 1 > $O/ncu_h0.txt 2>&1
for h in 0 3; do echo "== sections h16=$h"; grep -E "Grid Size|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Compute \(SM\) Throughput|Memory Throughput|Stall" $O/ncu_h$h.txt | head -30; done
ts end
