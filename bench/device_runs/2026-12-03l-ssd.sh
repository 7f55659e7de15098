# 2026-12-03 (fifteenth session): the chunked SSD on the device (mamba.cu ssd_chunk_state /
# state_pass / chunk_out, CINFER_CUDA_SSD_CHUNK): ssd_scan ops against the CPU with the switch
# on and off, memcheck and racecheck over the chunked kernels, Nemotron-H parity and the
# snapshot test on the device, then Nemotron-3-Nano dims (6 layers, bf16) pp512 / pp4096 with
# the chunked form and the token-by-token scan alternating, and an ncu kernel list of pp4096.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for sw in 1 0; do
  CINFER_CUDA_SSD_CHUNK=$sw timeout 120 $T --only "cuda ssd_scan" > $O/ops-ssd$sw.log 2>&1
  ts "ops ssd_scan (SSD_CHUNK=$sw): $(grep -c '^PASS' $O/ops-ssd$sw.log) pass, $(grep -c '^FAIL' $O/ops-ssd$sw.log) fail"
  grep -E '^FAIL|n=1100|n=4096' $O/ops-ssd$sw.log | cut -c1-150 | head -8
done
timeout 120 $SAN --tool memcheck --error-exitcode 99 $T --quick --only "cuda ssd_scan" > $O/mc-ssd.log 2>&1; ts "memcheck ssd_scan rc $?"
timeout 120 $SAN --tool racecheck --error-exitcode 99 $T --only "cuda ssd_scan n=150" > $O/rc-ssd.log 2>&1; ts "racecheck ssd_scan rc $?"; tail -3 $O/rc-ssd.log
PARITY_ONLY='nemotron' CINFER=$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -8; grep 'cuda long' $O/parity.log | cut -c1-150
CINFER_TEST_DEVICE=cuda timeout 60 .gpu/tests/test_snapshot > $O/snapshot.log 2>&1; ts "test_snapshot on cuda rc $?: $(tail -1 $O/snapshot.log)"
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 64 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
timeout 150 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out /tmp/nemh --dtype bf16 --seed 1 --layers 6 > /dev/null
for r in 1 2; do for p in 512 4096; do
  ts "nemh p$p SSD_CHUNK=1: $(b /tmp/nemh $p)"; ts "nemh p$p SSD_CHUNK=0: $(CINFER_CUDA_SSD_CHUNK=0 b /tmp/nemh $p)"
done; done
timeout 100 $NCU --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $C bench --model /tmp/nemh --device cuda --prompt-len 4096 --gen 1 > $O/ncu-pp-nemh.txt 2>&1; ts "ncu rc $?"
ts end
