# 2026-12-03 (fourteenth session): device prefill chunks of 4096 rows for the hybrids and
# DeepSeek (runner.c ci_runner_chunk_rows) against the old 256 (CINFER_DEVICE_CHUNK=256), one
# call: parity of those families on the device (with the new 600-token one-chunk check), then
# pp4096 of the hyb bench checkpoints and pp512 / pp4096 of DeepSeek-V2-Lite dims q_lora 1024
# 14 layers bf16 / fp8, chunk 4096 and 256 alternating, and an ncu kernel list of Nemotron's;
# test_snapshot (hybrid snapshots held in device memory) on the device; ssd_scan's new chunk kernel
# (ops against the CPU, memcheck, Nemotron pp4096 with CINFER_CUDA_SSD_CHUNK=0 beside it); decode
# tg64 after the prompt on each line (LFM2's conv-block fusions: compare with the 10:09 run).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
PARITY_ONLY='deepseek_v3|deepseek_v32|lfm2|nemotron|qwen3_next|qwen3_5' CINFER=$C timeout 240 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8; grep 'cuda long' $O/parity.log | cut -c1-150
$T --only "cuda ssd_scan" > $O/ops-ssd.log 2>&1; CINFER_CUDA_SSD_CHUNK=0 $T --only "cuda ssd_scan" > $O/ops-ssd0.log 2>&1
ts "ops ssd_scan: $(grep -c '^PASS' $O/ops-ssd.log) pass $(grep -c '^FAIL' $O/ops-ssd.log) fail; SSD_CHUNK=0: $(grep -c '^PASS' $O/ops-ssd0.log) pass $(grep -c '^FAIL' $O/ops-ssd0.log) fail"; grep '^FAIL' $O/ops-ssd*.log | head -5
$SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda ssd_scan" > $O/mc-ssd.log 2>&1; ts "memcheck ssd_scan rc $?"
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_snapshot > $O/snapshot.log 2>&1; ts "test_snapshot on cuda rc $?: $(tr '\n' ' ' < $O/snapshot.log | cut -c1-300)"
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 64 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
for spec in lfm2:bench/lfm2-8b-a1b.config.json:8 nemh:bench/nemotron-3-nano-30b-a3b.config.json:6 \
            q35:bench/qwen3.5-35b-a3b.config.json:4; do
  IFS=: read -r m cfg L <<< "$spec"
  timeout 150 $C make-random --config $cfg --out /tmp/$m --dtype bf16 --seed 1 --layers $L > /dev/null
  for r in 1 2; do ts "$m chunk 4096: $(b /tmp/$m 4096)"; ts "$m chunk 256: $(CINFER_DEVICE_CHUNK=256 b /tmp/$m 4096)"
    [ $m = nemh ] && ts "$m chunk 4096 SSD_CHUNK=0: $(CINFER_CUDA_SSD_CHUNK=0 b /tmp/$m 4096)"; done
  [ $m = nemh ] && timeout 100 $NCU --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --print-summary per-kernel \
    $C bench --model /tmp/$m --device cuda --prompt-len 4096 --gen 1 > $O/ncu-pp-$m.txt 2>&1
  rm -rf /tmp/$m
done
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds-q1024.json
for dt in bf16 fp8; do timeout 100 $C make-random --config /tmp/ds-q1024.json --out /tmp/ds-$dt --dtype $dt --seed 1 --layers 14 > /dev/null; done
for r in 1 2; do for p in 512 4096; do for dt in bf16 fp8; do
  ts "ds $dt p$p chunk 4096: $(b /tmp/ds-$dt $p)"; ts "ds $dt p$p chunk 256: $(CINFER_DEVICE_CHUNK=256 b /tmp/ds-$dt $p)"
done; done; done
ts end
