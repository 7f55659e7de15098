#!/usr/bin/env bash
# Runs the whole suite and prints "N passed, N failed" as its last line.
# Usage: tests/run.sh BUILD_DIR [BUILD_DIR...]  (a dir named *fuzz* runs the fuzzers briefly)
# For each build dir: every tests/test_* binary (cases print PASS/FAIL lines), then every
# tests/cli/*.sh script (run with CINFER=<dir>/cinfer; each prints PASS/FAIL lines too).
# tests/gpu/ is the GPU suite (tests/gpu/run.sh, on the device); of it only test_cuda_ops is
# built as a tests/test_* binary, and without a device it prints one SKIP line with the reason.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
count() { # $1 = label; reads the output in $log and the exit status $2
  local p f
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  grep '^FAIL ' "$log" | sed "s|^|[$1] |"
  grep '^SKIP ' "$log" | sed "s|^|[$1] |"   # a test that could not run here says why (no GPU)
  # a failing test's other lines (a script's "see above" details, what differed) come along
  [ "$f" -gt 0 ] && grep -v '^PASS \|^FAIL \|^SKIP ' "$log" | tail -12 | sed "s|^|[$1]   |"
  if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "[$1] FAIL: exited with status $2"; tail -5 "$log" | sed "s|^|[$1]   |"; f=1
  fi
  pass=$((pass + p)); fail=$((fail + f))
}
for dir in "$@"; do
  case "$dir" in
  *fuzz*)
    for fz in "$dir"/fuzz/fuzz_*; do
      [ -x "$fz" ] || continue
      name=$(basename "$fz"); corpus=tests/fuzz/corpus/${name#fuzz_}
      work=$(mktemp -d); cp -r "$corpus"/. "$work"/ 2>/dev/null
      if "$fz" -max_total_time="${FUZZ_SECONDS:-20}" -rss_limit_mb=2048 "$work" >"$log" 2>&1; then
        echo "PASS fuzz $name" >"$log"; count "$name" 0
      else
        cp "$log" "$log.keep"; echo "FAIL fuzz $name (see crash-* in the working dir)" >"$log"
        tail -20 "$log.keep"; count "$name" 1
      fi
      rm -rf "$work"
    done ;;
  *)
    for t in "$dir"/tests/test_*; do
      [ -x "$t" ] || continue
      "$t" >"$log" 2>&1; rc=$?
      count "$dir/$(basename "$t")" $rc
    done
    for s in tests/cli/*.sh; do
      [ -f "$s" ] || continue
      CINFER="$dir/cinfer" bash "$s" >"$log" 2>&1; rc=$?
      count "$dir/$(basename "$s")" $rc
    done ;;
  esac
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
