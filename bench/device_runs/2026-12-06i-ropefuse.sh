#!/bin/bash
# 2026-12-06 (thirty-eighth session), third call: rope_attend's decode steps in one launch
# (attn.cu d2_fuse, CINFER_CUDA_ROPE_FUSE: the decode2 kernel norms / rotates q and stores the new
# key itself instead of qk_rope_store's launch before it). (1) ops against the CPU: rope_attend,
# attention, qk_rope_store (its kernel now on the shared hnr_finish), fused and not; the batch /
# paged / snapshot tests on the device; `cinfer logits --step` of five fixtures fused against not
# (cmp: the same bits expected); memcheck of one fused logits --step; (2) decode tok/s, fused
# against not (one binary, alternating, two rounds): Qwen3-8B dims and Qwen3-30B-A3B dims, 12 layers.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 120 $C make-random --config bench/qwen3-8b.config.json --out /tmp/q8 --dtype bf16 --seed 1 --layers 12 > $O/make8.log 2>&1;
 timeout 120 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/q30 --dtype bf16 --seed 1 --layers 12 > $O/make30.log 2>&1) &
mk=$!
for sw in X=default CINFER_CUDA_ROPE_FUSE=0; do
  for o in 'cuda rope_attend' 'cuda attention' 'cuda qk_rope_store'; do
    env $sw timeout 100 $T --only "$o" > $O/ops.log 2>&1; rc=$?
    echo "ops [$sw] [$o] rc=$rc: $(grep -E 'passed|failed' $O/ops.log | tail -1)"
    [ $rc = 0 ] || grep -iE "fail" $O/ops.log | head -8
  done
done
for t in test_batch_argmax test_paged test_snapshot; do
  CINFER_TEST_DEVICE=cuda timeout 120 .gpu/tests/$t > $O/$t.log 2>&1; echo "$t rc=$?: $(tail -1 $O/$t.log)"
done
for f in qwen3_bf16 qwen3_tied llama_gqa_llama3 qwen3_moe lfm2; do
  fx=tests/fixtures/$f
  for sw in 1 0; do
    CINFER_CUDA_ROPE_FUSE=$sw timeout 60 $C logits --model $fx --tokens 1,5,9,22,7,3,11,40,2,6 --out /tmp/l_${f}_$sw.f32 --step --device cuda > /tmp/l.log 2>&1 || { echo "$f fuse=$sw failed: $(tail -2 /tmp/l.log)"; }
  done
  cmp -s /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 && echo "logits --step $f: fused = unfused (cmp)" || echo "logits --step $f: DIFFER ($(ls -la /tmp/l_${f}_1.f32 /tmp/l_${f}_0.f32 2>&1 | awk '{print $5}' | tr '\n' ' '))"
done
timeout 100 $SAN --tool memcheck --error-exitcode 99 --print-limit 20 $C logits --model tests/fixtures/qwen3_bf16 --tokens 1,5,9,22,7,3,11,40 --out /tmp/mc.f32 --step --device cuda > $O/memcheck.log 2>&1; echo "memcheck fused logits --step rc=$? $(grep -c 'ERROR SUMMARY: 0' $O/memcheck.log)"
ts "checks done"
wait $mk; ts "made: $(du -sh /tmp/q8 /tmp/q30 2>&1 | cut -f1 | tr '\n' ' ')"
for round in 1 2; do
  for m in q8 q30; do
    for sw in 1 0; do
      CINFER_CUDA_ROPE_FUSE=$sw timeout 60 $C bench --model /tmp/$m --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode" | sed "s/^/r$round $m fuse=$sw: /"
    done
  done
done
ts "bench done"
for sw in 1 0; do
  CINFER_CUDA_ROPE_FUSE=$sw timeout 60 $C bench --model /tmp/q30 --device cuda --prompt-len 128 --depth 3968 --gen 128 2>&1 | grep -E "^decode" | sed "s/^/q30@4k fuse=$sw: /"
done
ts end
