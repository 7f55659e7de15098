#!/bin/bash
# 2026-12-03 (eighteenth session), second call: the whole GPU suite on the session's code (the
# tensor-core GEMVs' loads: fp8 whole sectors, W = 1 codes two groups a load (pair, mma with the
# other group's B lanes zeroed), mxfp4 scale pairs, staged rows 2 mod 32 words apart (bank
# conflicts), the experts' down at 2 blocks an SM and balanced parts; hc_pre's part sums loaded
# together), the pair kernels' fallback (CINFER_CUDA_QT_W1PAIR=0) over the quantized op tests, then
# V4-Flash dims 4 layers fp8-fp4 and Qwen3-30B-A3B dims 12 layers mlx4 decode after 512, the lib
# of 8b72b50 (.gpuz/before.so.xz, same binary) alternating with this one, 2 rounds.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
mkdir -p /tmp/bef && cp .gpu/cinfer /tmp/bef/ && xz -dc .gpuz/before.so.xz > /tmp/bef/libcinfer_cuda.so
CB=/tmp/bef/cinfer
ts start
( nice -n 5 timeout 200 $C make-random --config bench/deepseek-v4-flash.config.json --out /tmp/v4 --dtype fp8-fp4 --seed 1 --layers 4 > $O/make-v4.log 2>&1
  nice -n 5 timeout 200 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make-q30.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 5 timeout 150 python3 bench/make_q4_pair.py /tmp/q30 12 /tmp/q30pair /nonexistent > $O/make-q4.log 2>&1; rm -rf /tmp/q30 ) &
OUT=$O/suite timeout 330 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -14 $O/suite.txt
for o in "moe_experts q" "cuda qmatmul" "cuda q"; do
  CINFER_CUDA_QT_W1PAIR=0 CINFER_CUDA_QT_DNBAL=0 timeout 100 $T --only "$o" > $O/ops-nopair.log 2>&1; ts "ops '$o' W1PAIR=0 DNBAL=0: $(tail -1 $O/ops-nopair.log)"; grep "^FAIL" $O/ops-nopair.log | head -4
done
wait; ts "made: $(du -sh /tmp/v4 /tmp/q30pair/mlx4 2>&1 | tr '\n' ' ') $(tail -1 $O/make-q4.log)"
b() { timeout 60 "$@" --device cuda --prompt-len 512 --gen 64 2>&1 | grep -E "^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
for r in 1 2; do
  ts "v4 r$r before: $(b $CB bench --model /tmp/v4)"
  ts "v4 r$r after:  $(b $C bench --model /tmp/v4)"
  ts "v4 r$r after W1PAIR=0: $(CINFER_CUDA_QT_W1PAIR=0 b $C bench --model /tmp/v4)"
  ts "v4 r$r after DNBAL=0: $(CINFER_CUDA_QT_DNBAL=0 b $C bench --model /tmp/v4)"
  ts "q30 mlx4 r$r before: $(b $CB bench --model /tmp/q30pair/mlx4)"
  ts "q30 mlx4 r$r after:  $(b $C bench --model /tmp/q30pair/mlx4)"
done
ts end
