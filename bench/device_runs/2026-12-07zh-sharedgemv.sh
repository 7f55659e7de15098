#!/bin/bash
# 2026-12-07 (fiftieth session), after call zg's phases (the ungated fold's down phase 18.8 -> 35.8 us on
# ds14, 26.8 -> 49.7 on nem12, for 11.5 / 20 MB more; its gate+up phase only +6.5 / +6.7 us): an ungated
# shared expert's gate / up stay in moe_fused's phase 2, its down leaves phase 3 for the matmul_acc GEMV
# right after the launch (moe_fused.cu SHM 1). (1) test_cuda_ops "moe_norm_experts shared" (against the CPU)
# and the routed cases, GPU parity of the DeepSeek / Nemotron-H fixtures with CINFER_CUDA_MOE_SHARED=1;
# (2) decode MOE_SHARED=1 / 0 on ds14 and nem12; (3) the GEMV switches together on ds14 (call zf: FEW=1
# +0.6..0.9%, SHORT=2 +1.0..1.3%, SHORT=3 +0.7..1.0%) and FEW=1 on LFM2-8B-A1B dims 8 layers.
# Staging: `make gpu-stage`, carry [".gpuz"]; ~6 min.
# A record: the measuring switches it names were removed after it ran (bench/RESULTS.md, fiftieth session).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
exec > >(tee "$O/run.log") 2>&1
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader; head -1 .gpu/MANIFEST
D=/tmp/ds14 N=/tmp/nem12 L=/tmp/lfm8
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds.json
( [ -d $D ] || timeout 240 $C make-random --config /tmp/ds.json --out $D --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  [ -d $N ] || timeout 240 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out $N --dtype bf16 --seed 1 --layers 12 > $O/make2.log 2>&1
  [ -d $L ] || timeout 240 $C make-random --config bench/lfm2-8b-a1b.config.json --out $L --dtype bf16 --seed 1 --layers 8 > $O/make3.log 2>&1
  ts made ) &
timeout 100 $T --only "moe_norm_experts shared" > $O/ops.log 2>&1
echo "ops 'moe_norm_experts shared' rc=$?: $(grep -c '^PASS' $O/ops.log) PASS, $(grep -c '^FAIL' $O/ops.log) FAIL"; grep ^FAIL $O/ops.log | head -4
timeout 40 $T --only "moe_norm_experts router bf16 experts bf16" > $O/ops2.log 2>&1
echo "ops routed bf16 rc=$?: $(grep -c '^PASS' $O/ops2.log) PASS, $(grep -c '^FAIL' $O/ops2.log) FAIL"; grep ^FAIL $O/ops2.log | head -3
CINFER_CUDA_MOE_SHARED=1 PARITY_ONLY='deepseek_v3|nemotron_h' CINFER=$C timeout 120 bash tests/gpu/parity.sh > $O/parity.log 2>&1
echo "gpu parity (deepseek_v3|nemotron_h, MOE_SHARED=1) rc=$?: $(grep -cE '^PASS' $O/parity.log) PASS, $(grep -cE '^FAIL' $O/parity.log) FAIL"; grep -E "^FAIL" $O/parity.log | head -6
ts tests
wait %1 2>/dev/null   # never a bare `wait` under `exec > >(tee)`
b() { env $1 timeout -k 5 60 $C bench --model $2 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E '^decode ' | head -1 | sed 's/  */ /g' | cut -c1-70; }
for r in 1 2; do
  for e in CINFER_CUDA_MOE_SHARED=1 CINFER_CUDA_MOE_SHARED=0; do echo "ds14 r$r $e: $(b $e $D)"; echo "nem12 r$r $e: $(b $e $N)"; done
  for e in "CINFER_CUDA_GEMV_FEW=1 CINFER_CUDA_GEMV_SHORT=3" "CINFER_CUDA_GEMV_FEW=1 CINFER_CUDA_GEMV_SHORT=2" X=0; do echo "ds14 r$r $e: $(b "$e" $D)"; done
  for e in X=0 CINFER_CUDA_GEMV_FEW=1; do echo "lfm8 r$r $e: $(b $e $L)"; done
done
ts end
