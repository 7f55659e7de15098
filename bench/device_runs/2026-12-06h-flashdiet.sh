#!/bin/bash
# 2026-12-06 (thirty-eighth session), second call: the flash prefill attention's instruction diet
# (attn_flash.cu: scores in base 2 with one ex2 an exponential, masks only in the tiles past a
# warp's shortest row, O / l rescaled only when a row's max rises 2^8 past its reference, 8-byte
# output stores). (1) the attention ops against the CPU on the default and every ops-flash form;
# (2) prefill tok/s, this library against a3d5377's (.gpuz/before.so.xz, the same binary),
# alternating, two rounds; (3) the chat's turn-5 TTFT split and the 5-turn chat, reuse against
# none, with this library, then with the one before.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
mkdir -p /tmp/bef && cp .gpu/cinfer /tmp/bef/ && xz -dc .gpuz/before.so.xz > /tmp/bef/libcinfer_cuda.so
ts start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
SERVE_STEPS=make SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb CINFER=$C timeout 150 bash bench/serve_cuda.sh > $O/make.log 2>&1
ts "made: $(du -sh /tmp/sb/q8 2>&1 | cut -f1)"
M=/tmp/sb/q8
for sw in X=default 'CINFER_CUDA_FLASH_SPLIT=0 CINFER_CUDA_FLASH_BK=16 CINFER_CUDA_FLASH_GQA=0' 'CINFER_CUDA_FLASH_LDM=0' \
          'CINFER_CUDA_FLASH_BQ=64' 'CINFER_CUDA_FLASH_BQ=128 CINFER_CUDA_FLASH_SEGMIN=64 CINFER_CUDA_FLASH_LDM=0' \
          'CINFER_CUDA_FLASH_H16=3' 'CINFER_CUDA_FLASH_H16=4 CINFER_CUDA_FLASH_SPLIT=0'; do
  for o in 'cuda attention' 'cuda rope_attend'; do
    env $sw timeout 100 $T --quick --only "$o" > $O/ops.log 2>&1; rc=$?
    echo "ops [$sw] [$o] rc=$rc: $(grep -E 'passed|failed' $O/ops.log | tail -1)"
    [ $rc = 0 ] || grep -iE "fail|max|error" $O/ops.log | head -8
  done
done
ts "ops done"
for round in 1 2; do
  for shape in "124 1372" "1496 0" "344 8192" "4096 0" "512 0"; do
    set -- $shape
    for v in before new new-h16; do
      [ $v = new-h16 ] && [ $1 != 124 ] && continue
      case $v in before) B=/tmp/bef/cinfer; E=X=1;; new) B=$C; E=X=1;; new-h16) B=$C; E=CINFER_CUDA_FLASH_H16=3;; esac
      env $E timeout 60 $B bench --model $M --device cuda --prompt-len $1 --depth $2 --gen 1 --reps 5 2>&1 | grep -E "^prefill" | sed "s/^/r$round $v $1@$2: /"
    done
  done
done
ts "bench done"
MODEL=$M timeout 60 bash bench/device_runs/2026-12-06e-ttft.sh
ts "ttft done"
for v in new before; do
  B=$C; [ $v = before ] && B=/tmp/bef/cinfer
  SERVE_STEPS=chat SERVE_SPECS="q8:bench/qwen3-8b.config.json:12" BENCH_DIR=/tmp/sb CINFER=$B SERVE_BUDGET=120 timeout 130 bash bench/serve_cuda.sh 2>&1 | grep CHAT | sed "s/^/$v /"
done
ts end
