# common.sh — sourced by the device-run scripts from the repository root (.gpuz carried): unpacks
# the staged binaries, sets the library path, names them ($T ops test, $C the CLI) and gives ts,
# a timestamped echo, and ncu_steps MODEL, the per-step ncu table (below). Scripts written before it (2026-12-02[a-e]) carry these lines themselves.
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
O=${OUT:-/tmp/out}; mkdir -p "$O"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
# ncu's per-step table of MODEL's decode (after 512): graph nodes of runs with 1 and 5 generated tokens,
# their difference per step (bench/ncu_steps.py, first ROWS lines, default 24); the raw files kept xz'd
ncu_steps() {   # MODEL [ROWS]
  local m=$1 n=${2:-24} b g
  b=$(basename "$m")
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for g in 1 5; do
    timeout 100 "$ncu" --graph-profiling node --cache-control none --clock-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --print-summary per-kernel \
      $C bench --model "$m" --device cuda --prompt-len 512 --gen $g > "$O/ncu-$b-g$g.txt" 2>&1
  done
  python3 bench/ncu_steps.py "$O/ncu-$b-g1.txt" "$O/ncu-$b-g5.txt" 2>&1 | head -"$n"
  xz -9 "$O"/ncu-"$b"-g*.txt 2>/dev/null
}
