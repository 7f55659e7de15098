#!/bin/bash
# 2026-12-06 (thirty-seventh session), last call: the f16 prefill attention taken by default from
# 512 query rows (CINFER_CUDA_FLASH_H16 unset) checked and timed against it off (=0), and the chat's
# turn-5 time to first token split with the new /metrics counters (queue wait, admission).
# (1) the attention ops with the default rule, forced on, forced off; test_paged (copy_2d);
# (2) prefill of 512 / 1000 / 1496 / 2048 fresh rows and 124 after 1372, default vs =0 alternating,
# two rounds (Qwen3-8B dims 12 layers bf16); (3) the chat breakdown (one server, reuse on, 5-turn
# chats of 1000 ids + 124 a turn, medians of 3 after a warm-up chat), then serve_cuda.sh's chat
# (reuse against a second server with --prefix-cache-mb 0).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for sw in X=default CINFER_CUDA_FLASH_H16=3 CINFER_CUDA_FLASH_H16=0; do
  for o in 'cuda attention' 'cuda rope_attend'; do env $sw timeout 60 $T --quick --only "$o" 2>&1 | tail -1 | sed "s/^/ops $sw $o: /"; done
done
CINFER_TEST_DEVICE=cuda timeout 90 .gpu/tests/test_paged 2>&1 | grep -cE "^PASS" | sed "s/^/paged PASS count: /"
ts "ops done"
SERVE_STEPS=make SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb CINFER=$C timeout 150 bash bench/serve_cuda.sh > $O/make.log 2>&1
ts "made: $(du -sh /tmp/sb/q8 2>&1 | cut -f1)"
M=/tmp/sb/q8
run() {   # run ENV=VALUE bench shape args
  local e=$1; shift
  env $e $C bench --model $M --device cuda $* --gen 1 --reps 5 2>&1 | grep -E "^reps" | sed "s/^/$e $*: /"; }
for r in 1 2; do
  for shape in "--prompt-len 512 --depth 0" "--prompt-len 1000 --depth 0" "--prompt-len 1496 --depth 0" \
               "--prompt-len 2048 --depth 0" "--prompt-len 124 --depth 1372"; do
    run X=default $shape; run CINFER_CUDA_FLASH_H16=0 $shape
  done
done
ts "bench done"
MODEL=$M timeout 120 bash bench/device_runs/2026-12-06e-ttft.sh
SERVE_STEPS=chat SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb CINFER=$C timeout 200 bash bench/serve_cuda.sh 2>&1 | grep -E "CHAT|FAIL" | head -20
ts end
