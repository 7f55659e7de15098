# 2026-12-03 (fifteenth session): the vectorised activation conversion (ops.cu convert_kernel) and
# mamba_conv's 8-token rows kernel, checked (ops against the CPU, memcheck) and timed on
# Nemotron dims pp4096 (12:49's 285k tok/s beside it); then ncu kernel lists: LFM2-8B-A1B dims
# decode (kernels inside the graphs, with DRAM bytes: where decode falls below the copy
# bandwidth) and the pp4096 of LFM2 and Qwen3.5-35B-A3B dims (the next prefill kernels).
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 200 $T --only "cuda mamba_conv" > $O/ops.log 2>&1; timeout 200 $T --only "cuda matmul" >> $O/ops.log 2>&1
timeout 200 $T --only "cuda moe" >> $O/ops.log 2>&1
ts "ops: $(grep -c '^PASS' $O/ops.log) pass, $(grep -c '^FAIL' $O/ops.log) fail"; grep '^FAIL' $O/ops.log | head -5
timeout 100 $SAN --tool memcheck --error-exitcode 99 $T --only "cuda mamba_conv" > $O/mc.log 2>&1; ts "memcheck mamba_conv rc $?"
PARITY_ONLY='nemotron|lfm2' CINFER=$C timeout 150 bash tests/gpu/parity.sh > $O/parity.log 2>&1
ts "parity rc $?: $(grep -c '^PASS' $O/parity.log) pass, $(grep -c '^FAIL' $O/parity.log) fail"; grep '^FAIL' $O/parity.log | head -5
b() { timeout 60 $C bench --model $1 --device cuda --prompt-len $2 --gen 64 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | cut -c1-70 | tr '\n' ' '; }
for spec in nemh:bench/nemotron-3-nano-30b-a3b.config.json:6 lfm2:bench/lfm2-8b-a1b.config.json:8 q35:bench/qwen3.5-35b-a3b.config.json:4; do
  IFS=: read -r m cfg L <<< "$spec"
  timeout 150 $C make-random --config $cfg --out /tmp/$m --dtype bf16 --seed 1 --layers $L > /dev/null
  ts "$m: $(b /tmp/$m 4096)"; ts "$m: $(b /tmp/$m 4096)"
  [ $m != nemh ] && timeout 100 $NCU --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    $C bench --model /tmp/$m --device cuda --prompt-len 4096 --gen 1 > $O/ncu-pp-$m.txt 2>&1
  [ $m = lfm2 ] && timeout 150 $NCU --clock-control none --graph-profiling node --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --print-summary per-kernel $C bench --model /tmp/$m --device cuda --prompt-len 64 --gen 8 > $O/ncu-tg-$m.txt 2>&1
  ts "$m ncu done"
done
ts end
