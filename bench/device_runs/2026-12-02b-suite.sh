set -u
t0=$SECONDS
OUT=$OUT bash tests/gpu/run.sh > $OUT/run.txt 2>&1
tail -25 $OUT/run.txt
echo "== run.sh took $((SECONDS - t0)) s"
which cmake g++ gcc node curl; python3 -c 'import numpy; print("numpy", numpy.__version__)'; nproc; df -h /tmp | tail -1
left=$((560 - (SECONDS - t0)))
if [ $left -gt 60 ]; then
  SERVE_STEPS=make SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_BUDGET=$left timeout $left bash bench/serve_cuda.sh 2>&1 | tail -5
fi
ls -la /tmp/cinfer-bench 2>/dev/null
echo "== total $((SECONDS - t0)) s"
