#!/bin/bash
# 2026-12-04 (twenty-fourth session), first call: the GPU suite with DeepSeek V3 / V3.2's caches
# paged (latent rows and indexer keys in the model's block pool: test_paged's DeepSeek fixtures
# with CINFER_TEST_DEVICE=cuda, test_cuda_ops' "paged" cases, serve-dsa), then decode / prefill
# of DeepSeek-V2-Lite dims (q_lora 1024, 14 layers, bf16, make-random --seed 1: the issue #16
# DeepSeek row) and the V3.2 lite dims (4 layers, top-2048) alternating with the build before
# the change (cinfer + libcinfer_cuda.so of the param-window commit, -lineinfo kernels; same
# sources as 7672b95 but its no-op line), each binary with its own lib. The two packs do not fit
# one carry: a first call unpacked .gpuz/before-min.tar.xz into /tmp/bef on the machine
# (`mkdir -p /tmp/bef && tar xJf .gpuz/before-min.tar.xz -C /tmp/bef`), this one runs right after.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
CB=/tmp/bef/.gpu/cinfer
[ -x $CB ] || { ts "no $CB (the machine was not the first call's): after only"; CB=$C; }
ts start
BD=/tmp/bm; mkdir -p $BD
( sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > $BD/ds.json
  sed -e 's/"q_lora_rank": null/"q_lora_rank": 1024/' -e 's/"deepseek_v3"/"deepseek_v32"/' \
      -e 's/"DeepseekV3ForCausalLM"/"DeepseekV32ForCausalLM"/' \
      -e 's/"n_group": 1,/"n_group": 1, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,/' \
      bench/deepseek-v2-lite-dims.config.json > $BD/dsv32.json
  nice -n 5 timeout 240 $C make-random --config $BD/ds.json --out $BD/ds14 --dtype bf16 --seed 1 --layers 14 > $O/make.log 2>&1
  nice -n 5 timeout 120 $C make-random --config $BD/dsv32.json --out $BD/dsv32 --dtype bf16 --seed 1 --layers 4 >> $O/make.log 2>&1 ) &
OUT=$O/suite timeout 360 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"; tail -18 $O/suite.txt
grep -E "paged" $O/suite/logs/ops.log | head -12
wait; ts "made $(du -sh $BD/ds14 $BD/dsv32 2>&1 | tr '\n' ' ')"
b() { timeout 90 "$@" --device cuda --gen 128 2>&1 | grep -E "^decode |^prefill" | sed 's/  */ /g' | cut -c1-62 | tr '\n' ' '; }
for r in 1 2; do
  for pl in 512 4096; do
    ts "ds14 pp$pl before r$r: $(b $CB bench --model $BD/ds14 --prompt-len $pl)"
    ts "ds14 pp$pl after  r$r: $(b $C bench --model $BD/ds14 --prompt-len $pl)"
  done
  ts "dsv32 pp8192 before r$r: $(b $CB bench --model $BD/dsv32 --prompt-len 8192)"
  ts "dsv32 pp8192 after  r$r: $(b $C bench --model $BD/dsv32 --prompt-len 8192)"
done
tar czf $O/suite-logs.tgz -C $O suite 2>/dev/null; rm -rf $O/suite
ts end
