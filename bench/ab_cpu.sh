#!/usr/bin/env bash
# Two settings of one cinfer build side by side on the CPU, alternating run by run (A, B, A, B, ...),
# for effects smaller than a shared machine's swings between runs: per arm the median, lowest and
# highest prefill and decode tok/s over ROUNDS rounds (each run `cinfer bench --reps REPS`, itself
# the median of REPS). An arm is "ENV=VALUE ... -- flags" (either part may be empty); BIN=path among
# its ENV runs that cinfer binary instead of CINFER (two builds of a compile-time change).
#   bench/ab_cpu.sh MODEL 'X=1 -- --mlx-amx8' 'CINFER_CPU_PAR_SHARED=1 -- --mlx-amx8'
#   CINFER (build/cinfer) THREADS (2) PROMPT (128) GEN (64) REPS (3) ROUNDS (8)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: bench/ab_cpu.sh MODEL 'ENV... -- FLAGS' 'ENV... -- FLAGS'" >&2; exit 2; }
M=$1 CINFER=${CINFER:-build/cinfer} TH=${THREADS:-2} P=${PROMPT:-128} G=${GEN:-64} REPS=${REPS:-3} R=${ROUNDS:-8}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cpus), $(date -u '+%F %H:%M UTC'), $CINFER"
echo "model $M, threads $TH, prompt $P, gen $G, reps $REPS, rounds $R"
run() {   # arm -> "prefill decode"
  local envs=${1%%--*} flags="" bin=$CINFER e
  [[ $1 == *--* ]] && flags=${1#*--}
  for e in $envs; do [[ $e == BIN=* ]] && bin=${e#BIN=}; done
  # shellcheck disable=SC2086
  env $envs "$bin" bench --model "$M" --threads "$TH" --prompt-len "$P" --gen "$G" --reps "$REPS" $flags 2>&1 |
    awk '/^prefill /{for(i=1;i<=NF;i++) if($i=="=") p=$(i+1)} /^decode  /{for(i=1;i<=NF;i++) if($i=="=") d=$(i+1)} END{print p, d}'
}
ROWS=$(mktemp "${TMPDIR:-/tmp}/ab_cpu.XXXXXX") || exit 1
trap 'rm -f "$ROWS"' EXIT
for r in $(seq "$R"); do
  for a in 2 3; do
    arm=${!a}
    res=$(run "$arm")
    echo "round $r [$arm]: prefill $(echo "$res" | cut -d' ' -f1) decode $(echo "$res" | cut -d' ' -f2)"
    echo "$a $res" >> "$ROWS"
  done
done
for a in 2 3; do
  for col in 2 3; do
    name=$([ $col = 2 ] && echo prefill || echo decode)
    awk -v a=$a -v c=$col '$1==a{print $c}' "$ROWS" | sort -n |
      awk -v n="$name" -v arm="${!a}" '{v[NR]=$1} END{m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2;
        printf "[%s] %s: median %.2f, low %.2f, high %.2f tok/s (%d runs)\n", arm, n, m, v[1], v[NR], NR}'
  done
done
