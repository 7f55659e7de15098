# 2026-12-03 (fourteenth session): the prefill changes on the H200 in one call. Ops against the
# CPU (ssd_scan's chunk kernel and the flash2 attention kernel, each with its switch off too),
# memcheck over both, test_snapshot on the device, parity of the hybrid / DeepSeek / dense
# fixtures (with the 600-token one-chunk check), then pp4096 + tg64 of the hyb bench checkpoints
# with the new defaults and with one change at a time undone (CINFER_DEVICE_CHUNK=256,
# CINFER_CUDA_FLASH2=0, CINFER_CUDA_SSD_CHUNK=0 for Nemotron), and DeepSeek-V2-Lite dims
# q_lora 1024 14 layers bf16 / fp8 pp512 / pp4096 with chunks of 4096 and 256.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
for sw in 1 0; do
  CINFER_CUDA_SSD_CHUNK=$sw CINFER_CUDA_FLASH2=$sw timeout 200 $T --only "cuda ssd_scan" > $O/ops-$sw.log 2>&1
  CINFER_CUDA_SSD_CHUNK=$sw CINFER_CUDA_FLASH2=$sw timeout 200 $T --only "cuda attention" >> $O/ops-$sw.log 2>&1
  CINFER_CUDA_SSD_CHUNK=$sw CINFER_CUDA_FLASH2=$sw timeout 100 $T --only "cuda rope_attend" >> $O/ops-$sw.log 2>&1
  ts "ops (switches $sw): $(grep -c '^PASS' $O/ops-$sw.log) pass, $(grep -c '^FAIL' $O/ops-$sw.log) fail"; grep '^FAIL' $O/ops-$sw.log | head -6
done
timeout 200 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda attention" > $O/mc.log 2>&1; r1=$?
timeout 100 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda ssd_scan" >> $O/mc.log 2>&1; ts "memcheck attention rc $r1, ssd_scan rc $?"
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_snapshot > $O/snapshot.log 2>&1; ts "test_snapshot on cuda rc $?: $(tr '\n' ' ' < $O/snapshot.log | cut -c1-300)"
PARITY_ONLY='deepseek_v3|deepseek_v32|lfm2|nemotron|qwen3_next|qwen3_5|qwen3_bf16|qwen3_tied|llama_yarn|qwen3_moe$' CINFER=$C timeout 200 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8; grep 'cuda long' $O/parity.log | cut -c1-140 | head -30
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 64 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
for spec in lfm2:bench/lfm2-8b-a1b.config.json:8 nemh:bench/nemotron-3-nano-30b-a3b.config.json:6 \
            q35:bench/qwen3.5-35b-a3b.config.json:4; do
  IFS=: read -r m cfg L <<< "$spec"
  timeout 150 $C make-random --config $cfg --out /tmp/$m --dtype bf16 --seed 1 --layers $L > /dev/null
  ts "$m new: $(b /tmp/$m 4096)"
  ts "$m chunk 256: $(CINFER_DEVICE_CHUNK=256 b /tmp/$m 4096)"
  ts "$m flash2=0: $(CINFER_CUDA_FLASH2=0 b /tmp/$m 4096)"
  [ $m = nemh ] && ts "$m ssd_chunk=0: $(CINFER_CUDA_SSD_CHUNK=0 b /tmp/$m 4096)"
  ts "$m new: $(b /tmp/$m 4096)"
  rm -rf /tmp/$m
done
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/ds-q1024.json
for dt in bf16 fp8; do timeout 100 $C make-random --config /tmp/ds-q1024.json --out /tmp/ds-$dt --dtype $dt --seed 1 --layers 14 > /dev/null; done
for p in 512 4096; do for dt in bf16 fp8; do
  ts "ds $dt p$p chunk 4096: $(b /tmp/ds-$dt $p)"; ts "ds $dt p$p chunk 256: $(CINFER_DEVICE_CHUNK=256 b /tmp/ds-$dt $p)"
done; done
ts end
