# bench --batch N: batched greedy decode of N sequences (ci_forward_batch_argmax) timed in
# the same run as the single-sequence lines, on a fixture: the batch line and its ratio to
# the single-sequence decode line are printed, the single-sequence lines stay; --batch
# outside 1..256 is a usage error (exit 2, one line naming the flag). --reps N times N runs of
# prefill + decode in one process: a "reps" line with N values of each, the usual lines from the
# median run; outside 1..100 a usage error.
. "$(dirname "$0")/lib.sh"


for fx in tests/fixtures/qwen3_bf16 tests/fixtures/llama_yarn; do
  name=$(basename $fx)
  expect_ok "bench --batch 2 $name" $CINFER bench --model $fx --prompt-len 6 --gen 3 --depth 4 --batch 2 --threads 1
  if grep -Eq "^decode batch 6 tokens in [0-9.]+ s = [0-9.]+ tok/s \(2 sequences x 3 steps\)$" "$TMP/out" &&
     grep -Eq "^decode +3 tokens in " "$TMP/out" && grep -Eq "^prefill +6 tokens in " "$TMP/out" &&
     grep -Eq "^batch gain +[0-9.]+x " "$TMP/out"; then pass "bench --batch 2 $name output"
  else fail "bench --batch 2 $name output" "$(cat "$TMP/out")"; fi
done
expect_usage "bench --batch 0" "bench: --batch expects an integer in [1, 256], got '0'" \
  $CINFER bench --model tests/fixtures/qwen3_bf16 --batch 0
expect_usage "bench --batch 257" "--batch expects an integer in [1, 256]" $CINFER bench --model tests/fixtures/qwen3_bf16 --batch 257
expect_usage "bench --batch x" "--batch expects an integer" $CINFER bench --model tests/fixtures/qwen3_bf16 --batch x

expect_ok "bench --reps 3" $CINFER bench --model tests/fixtures/qwen3_bf16 --prompt-len 6 --gen 3 --reps 3 --threads 1
if grep -Eq "^reps +3 runs, prefill tok/s( [0-9.]+){3}, decode tok/s( [0-9.]+){3} \(the lines above: the medians\)$" "$TMP/out" &&
   grep -Eq "^prefill +6 tokens in " "$TMP/out" && grep -Eq "^decode +3 tokens in " "$TMP/out"; then pass "bench --reps 3 output"
else fail "bench --reps 3 output" "$(cat "$TMP/out")"; fi
expect_ok "bench without --reps" $CINFER bench --model tests/fixtures/qwen3_bf16 --prompt-len 6 --gen 3 --threads 1
if grep -q "^reps" "$TMP/out"; then fail "bench without --reps: no reps line" "$(cat "$TMP/out")"; else pass "bench without --reps: no reps line"; fi
expect_usage "bench --reps 0" "bench: --reps expects an integer in [1, 100], got '0'" \
  $CINFER bench --model tests/fixtures/qwen3_bf16 --reps 0
expect_usage "bench --reps 101" "--reps expects an integer in [1, 100]" $CINFER bench --model tests/fixtures/qwen3_bf16 --reps 101
