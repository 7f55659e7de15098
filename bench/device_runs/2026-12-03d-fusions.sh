#!/bin/bash
# (bench/RESULTS.md, thirteenth session, 2026-12-03: one device call from the repository root with
# .gpuz carried.) After the q_b norm fusion, the shared experts' matmul_acc and mla_rope: the
# mla_rope op tests (and memcheck over them), parity of the MLA /
# shared-expert families on the device, serve-paged twice (its CUDA flake), DeepSeek V2-Lite dims
# q_lora 1024 14 layers fp8 / bf16 decode after 512 (2 rounds), an ncu kernel-time list of a 3-layer
# fp8 decode, and DeepSeek-V3 dims fp8 (5 layers) decode with CINFER_CUDA_QMMA 1 / 0.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1 CINFER=$PWD/$C
$T --only "cuda mla_rope" > $O/ops-mr.log 2>&1; $T --only "cuda rope" >> $O/ops-mr.log 2>&1
ts "ops mla_rope / rope: $(grep -c '^PASS' $O/ops-mr.log) pass, $(grep -c '^FAIL' $O/ops-mr.log) fail"; grep '^FAIL' $O/ops-mr.log | head -5
$SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda mla_rope" > $O/mc-mr.log 2>&1; ts "memcheck mla_rope rc $? $(grep -c '^PASS' $O/mc-mr.log) pass"
PARITY_ONLY='deepseek|qwen3_5_moe|nemotron|qwen3_next|qwen3_moe' timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
for r in 1 2; do SERVE_DEVICE=cuda timeout 60 bash tests/cli/serve_paged.sh > $O/sp$r.log 2>&1; ts "serve-paged r$r: $(grep -c '^PASS' $O/sp$r.log) pass, $(grep -c '^FAIL' $O/sp$r.log) fail"; done
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds-q1024.json
for dt in bf16 fp8; do $C make-random --config /tmp/ds-q1024.json --out /tmp/ds-$dt --dtype $dt --seed 1 --layers 14 > /dev/null; done
$C make-random --config /tmp/ds-q1024.json --out /tmp/ds3 --dtype fp8 --seed 1 --layers 3 > /dev/null
ts made
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len ${2:-512} --gen 128 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-90 | tr '\n' ' '; }
for r in 1 2; do
  ts "r$r fp8: $(b /tmp/ds-fp8)"
  ts "r$r bf16: $(b /tmp/ds-bf16)"
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 120 $NCU --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $C bench --model /tmp/ds3 --device cuda --prompt-len 16 --gen 9 > $O/ncu-ds3.txt 2>&1; ts "ncu rc $?"
rm -rf /tmp/ds-bf16 /tmp/ds3
timeout 200 $C make-random --config bench/deepseek-v3.config.json --out /tmp/v3 --dtype fp8 --seed 1 --layers 5 > /dev/null; ts "made v3 rc $?"
for r in 1; do
  ts "v3 fp8 qmma=1: $(CINFER_CUDA_QMMA=1 b /tmp/v3)"
  ts "v3 fp8 qmma=0: $(CINFER_CUDA_QMMA=0 b /tmp/v3)"
done
ts end
