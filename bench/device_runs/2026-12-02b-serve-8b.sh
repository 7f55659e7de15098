set -u
t0=$SECONDS
SERVE_STEPS="make bench chat" SERVE_SPECS="qwen3-8b-12l:bench/qwen3-8b.config.json:12" SERVE_PER=1 SERVE_BUDGET=${B:-190} OUT=$OUT timeout $((${B:-190} + 10)) bash bench/serve_cuda.sh > $OUT/b.txt 2>&1
sed -n '/serve summary/,$p' $OUT/b.txt
grep -h "cinfer: serve:" $OUT/serve-logs/*.log | head -3
echo "total $((SECONDS - t0)) s"
