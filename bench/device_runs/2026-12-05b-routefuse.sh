#!/bin/bash
# 2026-12-05 (twenty-eighth session), second call: norm_matmul_route, the MoE router's GEMV
# routing in its last block (one launch fewer a MoE layer; gemv.cu for 16- / 32-bit routers,
# quant_mma.cu for MLX ones). The GPU suite (its ops step has the
# new norm_matmul_route cases: fused = the two ops bit for bit, three calls in a row; ops-alt runs
# with CINFER_CUDA_ROUTE_FUSE=0), then decode A/B in one binary, CINFER_CUDA_ROUTE_FUSE=1 vs 0,
# alternating: Qwen3-30B-A3B dims 12 layers bf16 and its mlx 4-bit twin (8-bit routers), and
# DeepSeek-V2-Lite dims + q_lora 1024 14 layers (make-random --seed 1 on the device, while the suite runs).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
BD=/tmp/bm; mkdir -p $BD
( sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
  nice -n 15 timeout 300 $C make-random --config bench/qwen3-30b-a3b.config.json --out $BD/q30 --dtype bf16 --seed 1 --layers 12 > $O/make.log 2>&1
  MAKE_Q4_JOBS=8 nice -n 15 timeout 250 python3 bench/make_q4_pair.py $BD/q30 12 $BD/q30pair /nonexistent > $O/make-q4.log 2>&1 &
  nice -n 15 timeout 300 $C make-random --config $BD/ds.json --out $BD/ds14 --dtype bf16 --seed 1 --layers 14 >> $O/make.log 2>&1; wait ) &
OUT=$O/suite timeout 380 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -18 $O/suite.txt
wait; ts "made $(du -sh $BD/q30 $BD/q30pair/mlx4 $BD/ds14 2>&1 | tr '\n' ' ')"
b() { timeout 60 env CINFER_CUDA_ROUTE_FUSE=$1 $C bench --model $2 --device cuda --prompt-len ${3:-512} --gen 128 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
for r in 1 2 3; do
  for m in q30 q30pair/mlx4 ds14; do
    for f in 1 0; do ts "$m ROUTE_FUSE=$f r$r: $(b $f $BD/$m)"; done
  done
done
for f in 1 0; do ts "q30 d4096 ROUTE_FUSE=$f: $(b $f $BD/q30 4096)"; done
grep -E "^FAIL norm_matmul_route" $O/suite/logs/ops.log | head -5; grep -c "^PASS norm_matmul_route" $O/suite/logs/ops.log
tar czf $O/suite-logs.tgz -C $O suite 2>/dev/null; rm -rf $O/suite
ts end
