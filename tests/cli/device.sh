# --device cpu|cuda|auto, --no-graphs, --mmap, --bf16-act and --int16-act on the commands that run a model, on a machine
# without a GPU (the CI machines): a bad --device value is a usage error (exit 2, one line
# naming the flag and the accepted values) for each command; --device cuda fails with one
# line naming the cause and leaves no --out file (nor its temp file, and an existing one as
# it was); --device auto runs on the CPU and gives the same logits as --device cpu; a family
# with no CUDA path is refused naming the family, before any device is tried (so on any
# machine); inspect names the backend and the device memory a CUDA run needs; --stats names
# the backend; bench --depth decodes after that many tokens of context. When a CUDA device
# is usable here the no-GPU checks are skipped with a note (tests/gpu covers that machine).
. "$(dirname "$0")/lib.sh"
fx=tests/fixtures/llama_gqa_llama3


printf 'The quick brown fox jumps over the lazy dog. ' >"$TMP/text"
m=models/demo
[ -f $m/tokenizer.json ] || m=$fx

# ---- a bad --device value: usage error, each command ----
bad="--device expects cpu, cuda or auto, got 'bogus'"
expect_usage "logits --device bogus"     "logits: $bad"     $CINFER logits --model $fx --tokens 1,2 --out "$TMP/bogus.f32" --device bogus
expect_usage "generate --device bogus"   "generate: $bad"   $CINFER generate --model $fx --prompt-ids 1,2 --ids --device bogus
expect_usage "bench --device bogus"      "bench: $bad"      $CINFER bench --model $fx --device bogus
expect_usage "perplexity --device bogus" "perplexity: $bad" $CINFER perplexity --model $m --file "$TMP/text" --device bogus
expect_usage "chat --device bogus"       "chat: $bad"       $CINFER chat --model $fx --device bogus
expect_usage "serve --device bogus"      "serve: $bad"      timeout 20 $CINFER serve --model $fx --port 0 --device bogus
expect_usage "--device is case-sensitive" "got 'CUDA'"      $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" --device CUDA
expect_usage "--device needs a value"    "--device needs a value" $CINFER generate --model $fx --prompt-ids 1 --ids --device
expect_usage "--no-graphs takes no value" "unknown option '1'" $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" --no-graphs 1
[ ! -e "$TMP/bogus.f32" ] && pass "a usage error writes no --out file" || fail "a usage error writes no --out file" "$(ls -l "$TMP"/bogus.f32*)"

# ---- families without a CUDA path: refused naming the family, before any device ----
# (deepseek_v4 left this list on 2026-12-02: its f32 / bf16 / fp8 path passed the GPU suite; FP4
# experts and MLX codes are refused at placement, which needs a device to reach)
nocuda=""
for fam in $nocuda; do
  expect_err "$fam --device cuda names the family" "$fam: no CUDA path yet" \
    $CINFER logits --model tests/fixtures/$fam --tokens 1,2 --out "$TMP/$fam.f32" --device cuda
  [ ! -e "$TMP/$fam.f32" ] && pass "$fam: no --out file" || fail "$fam: no --out file" "$(ls -l "$TMP/$fam.f32")"
  expect_ok "$fam --device cpu" $CINFER logits --model tests/fixtures/$fam --tokens 1,2 --out "$TMP/$fam.cpu" --device cpu
  expect_ok "$fam --device auto" $CINFER logits --model tests/fixtures/$fam --tokens 1,2 --out "$TMP/$fam.auto" --device auto
  cmp -s "$TMP/$fam.cpu" "$TMP/$fam.auto" && pass "$fam: auto = cpu logits" || fail "$fam: auto = cpu logits" "files differ"
done
# ---- a CUDA path written but not verified on a GPU yet: refused unless asked for ----
# (deepseek_v3 / v32, lfm2 / lfm2_moe, nemotron_h, qwen3_next / qwen3_5 / qwen3_5_moe, deepseek_v4 left this
# list on 2026-12-01/02, after the GPU suite; none is in it now)
unverified=""
for fam in $unverified; do
  expect_err "$fam --device cuda: not verified" "$fam: its CUDA path has not passed the GPU tests yet" \
    env -u CINFER_CUDA_UNVERIFIED $CINFER logits --model tests/fixtures/$fam --tokens 1,2 --out "$TMP/$fam.f32" --device cuda
  expect_ok "$fam --device auto stays on the CPU" env -u CINFER_CUDA_UNVERIFIED $CINFER logits --model tests/fixtures/$fam \
    --tokens 1,2 --out "$TMP/$fam.auto" --device auto
done

# ---- inspect: the backend and the device memory a CUDA run needs ----
expect_ok "inspect" $CINFER inspect --model $fx
grep -q "^backend  *cpu-" "$TMP/out" && pass "inspect names the CPU backend" || fail "inspect names the CPU backend" "$(cat "$TMP/out")"
ctx=$(grep -o '"max_position_embeddings": *[0-9]*' $fx/config.json | grep -o '[0-9]*$')
if grep -Eq "^device memory: +[0-9.e-]+ GiB weights \+ [0-9.e-]+ GiB cache at $ctx tokens \+ [0-9.e-]+ GiB scratch = [0-9.e-]+ GiB$" "$TMP/out" &&
   grep -Eq "^device memory: +[0-9.e-]+ GiB weights \+ [0-9.e-]+ GiB cache at 4096 tokens " "$TMP/out"; then
  pass "inspect: device memory at the model's context ($ctx) and at 4096 tokens"
else fail "inspect: device memory lines" "$(grep -i device "$TMP/out")"; fi
# the weights term is the checkpoint's bytes: 415.25 KiB of F32 here = 0.0004 GiB
grep -q "^device memory: *0.0004 GiB weights" "$TMP/out" && pass "inspect: device weight bytes" || fail "inspect: device weight bytes" "$(grep -i device "$TMP/out")"
expect_usage "inspect takes no --device" "unknown option '--device'" $CINFER inspect --model $fx --device cuda

# ---- --stats names the backend ----
$CINFER generate --model $fx --prompt-ids 1,2,3 --max-tokens 4 --ids --stats --device auto >"$TMP/out" 2>"$TMP/err"
grep -q "tok/s overall) on cpu-" "$TMP/err" && pass "generate --stats names the backend" || fail "generate --stats names the backend" "$(cat "$TMP/err")"
printf 'Hello\n' | $CINFER chat --max-tokens 4 --stats --device cpu >"$TMP/out" 2>"$TMP/err"
grep -q "tok/s after, on cpu-" "$TMP/err" && pass "chat --stats names the backend" || fail "chat --stats names the backend" "$(cat "$TMP/err")"

# ---- bench --depth: decode after that many tokens of context ----
expect_ok "bench --depth" $CINFER bench --model $fx --prompt-len 8 --gen 4 --depth 24 --threads 1 --device auto --no-graphs
grep -q "^prefill  *8 tokens .* (context 24\.\.32)$" "$TMP/out" && grep -q "^decode  *4 tokens .* (context 32\.\.36)$" "$TMP/out" &&
  grep -Eq "^(machine|device) " "$TMP/out" && pass "bench --depth output" || fail "bench --depth output" "$(cat "$TMP/out")"
expect_usage "bench --depth range" "--depth expects an integer" $CINFER bench --model $fx --depth -1

# ---- --mmap: the CPU reads the files in place instead of its copy; the same bits ----
expect_ok "logits from the copy" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/copy.f32" --device cpu
expect_ok "logits --mmap" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/mmap.f32" --device cpu --mmap
cmp -s "$TMP/copy.f32" "$TMP/mmap.f32" && pass "--mmap gives the copy's logits bit for bit" || fail "--mmap gives the copy's logits bit for bit" "differ"
expect_usage "--mmap takes no value" "unknown option '1'" $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" --mmap 1
expect_usage "serve --mmap takes no value" "unknown option '1'" timeout 20 $CINFER serve --model $fx --port 0 --mmap 1
# ---- --bf16-act: runs (bf16 dot products on AVX512-BF16 CPUs, the f32 path elsewhere); f32 weights keep their bits ----
expect_ok "logits --bf16-act" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/bfa.f32" --device cpu --bf16-act
cmp -s "$TMP/copy.f32" "$TMP/bfa.f32" && pass "--bf16-act leaves an f32 checkpoint's logits as they are" || fail "--bf16-act leaves an f32 checkpoint's logits as they are" "differ"
expect_ok "generate --bf16-act (bf16 weights)" $CINFER generate --model tests/fixtures/qwen3_bf16 --prompt-ids 1,2,3 --max-tokens 4 --ids --bf16-act
expect_usage "--bf16-act takes no value" "unknown option '1'" $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" --bf16-act 1
# which bf16 set --bf16-act takes: AMX tiles where the CPU lists AMX-BF16 (the kernel shows the flag only
# when it supports the tiles), unless CINFER_CPU_AMX=0; vdpbf16ps on other AVX512-BF16 CPUs
bf16_set() { env "$@" $CINFER bench --model tests/fixtures/qwen3_bf16 --prompt-len 20 --gen 2 --bf16-act 2>/dev/null | grep -o 'backend [a-z0-9-]*'; }
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && grep -qw amx_bf16 /proc/cpuinfo && grep -qw avx512_bf16 /proc/cpuinfo &&
   grep -qw avx512_vnni /proc/cpuinfo; then
  be=$(bf16_set)
  [ "$be" = "backend cpu-amx-bf16" ] && pass "--bf16-act takes the AMX tiles on this AMX CPU" || fail "--bf16-act takes the AMX tiles on this AMX CPU" "got '$be'"
  be=$(bf16_set CINFER_CPU_AMX=0)
  [ "$be" = "backend cpu-avx512-bf16" ] && pass "CINFER_CPU_AMX=0 keeps vdpbf16ps" || fail "CINFER_CPU_AMX=0 keeps vdpbf16ps" "got '$be'"
elif grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  be=$(bf16_set)
  [ "$be" = "backend cpu-avx512-bf16" ] && pass "--bf16-act takes vdpbf16ps on this CPU (no AMX)" || fail "--bf16-act takes vdpbf16ps on this CPU (no AMX)" "got '$be'"
fi
# ---- --int16-act: runs (int16 activations for MLX 4- / 8-bit weights on AVX-512 VNNI CPUs, the f32 path elsewhere) ----
expect_ok "logits --int16-act" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/i16.f32" --device cpu --int16-act
cmp -s "$TMP/copy.f32" "$TMP/i16.f32" && pass "--int16-act leaves an unquantized checkpoint's logits as they are" || fail "--int16-act leaves an unquantized checkpoint's logits as they are" "differ"
expect_ok "generate --int16-act (4-bit weights)" $CINFER generate --model tests/fixtures/mlx_qwen3_moe_4bit --prompt-ids 1,2,3 --max-tokens 4 --ids --int16-act
expect_ok "bench --int16-act with --bf16-act" $CINFER bench --model tests/fixtures/mlx_qwen3_mixed --prompt-len 4 --gen 2 --int16-act --bf16-act
expect_usage "--int16-act takes no value" "unknown option '1'" $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" --int16-act 1
expect_usage "serve --int16-act takes no value" "unknown option '1'" timeout 20 $CINFER serve --model $fx --port 0 --int16-act 1

# ---- --mlx-amx: MLX 4- / 8-bit weights on AMX-INT8 tiles and VNNI where the CPU has them, on VNNI alone where it
# has AVX-512 VNNI without the tiles, on AVX2 (mlx_avx2.c) elsewhere (the same bits), the f32 path without AVX2;
# --mlx-amx8 the same with int8 activations for 4-bit matrices ----
for f in --mlx-amx --mlx-amx8; do
  expect_ok "logits $f" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/mamx.f32" --device cpu $f
  cmp -s "$TMP/copy.f32" "$TMP/mamx.f32" && pass "$f leaves an unquantized checkpoint's logits as they are" || fail "$f leaves an unquantized checkpoint's logits as they are" "differ"
  expect_ok "generate $f (4-bit weights)" $CINFER generate --model tests/fixtures/mlx_qwen3_moe_4bit --prompt-ids 1,2,3 --max-tokens 4 --ids $f
  expect_usage "$f takes no value" "unknown option '1'" $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" $f 1
  expect_usage "serve $f takes no value" "unknown option '1'" timeout 20 $CINFER serve --model $fx --port 0 $f 1
done
be=$($CINFER bench --model tests/fixtures/mlx_qwen3_moe_4bit --prompt-len 20 --gen 2 --mlx-amx 2>/dev/null | grep -o 'backend [a-z0-9-]*')
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && grep -qw amx_bf16 /proc/cpuinfo && grep -qw avx512_bf16 /proc/cpuinfo &&
   grep -qw avx512_vnni /proc/cpuinfo; then
  [ "$be" = "backend cpu-avx512-amx-mlx" ] && pass "--mlx-amx takes the AMX tiles on this AMX CPU" || fail "--mlx-amx takes the AMX tiles on this AMX CPU" "got '$be'"
elif grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null && grep -qw avx512bw /proc/cpuinfo; then
  case "$be" in *-vnni-mlx) pass "--mlx-amx takes AVX-512 VNNI alone on this CPU without AMX" ;;
    *) fail "--mlx-amx takes AVX-512 VNNI alone on this CPU without AMX" "got '$be'" ;; esac
elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  case "$be" in *-avx2-mlx) pass "--mlx-amx takes mlx_avx2.c on this CPU without AVX-512 VNNI" ;;
    *) fail "--mlx-amx takes mlx_avx2.c on this CPU without AVX-512 VNNI" "got '$be'" ;; esac
else
  case "$be" in *mlx*) fail "--mlx-amx computes as before without AVX2" "got '$be'" ;; *) pass "--mlx-amx computes as before without AVX2" ;; esac
fi

# ---- --mlx-amx8's backend and rounding (CPUs with AVX2 or AVX-512 VNNI) ----
be8=$($CINFER bench --model tests/fixtures/mlx_llama_4bit --prompt-len 20 --gen 2 --mlx-amx8 2>/dev/null | grep -o 'backend [a-z0-9-]*')
if grep -qw avx2 /proc/cpuinfo 2>/dev/null || { grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null && grep -qw avx512bw /proc/cpuinfo; }; then
  case "$be8" in *-mlx8) pass "--mlx-amx8 names its backend *-mlx8" ;; *) fail "--mlx-amx8 names its backend *-mlx8" "got '$be8'" ;; esac
  $CINFER logits --model tests/fixtures/mlx_llama_4bit --tokens 1,2,3,4,5,6,7,8,9 --out "$TMP/l16.f32" --mlx-amx >/dev/null 2>&1
  $CINFER logits --model tests/fixtures/mlx_llama_4bit --tokens 1,2,3,4,5,6,7,8,9 --out "$TMP/l8.f32" --mlx-amx8 --mlx-amx >/dev/null 2>&1
  [ -s "$TMP/l8.f32" ] && ! cmp -s "$TMP/l16.f32" "$TMP/l8.f32" && pass "--mlx-amx8 (with --mlx-amx too) rounds a 4-bit model's activations to int8" ||
    fail "--mlx-amx8 (with --mlx-amx too) rounds a 4-bit model's activations to int8" "logits as --mlx-amx's"
else
  case "$be8" in *mlx*) fail "--mlx-amx8 computes as before without AVX2" "got '$be8'" ;; *) pass "--mlx-amx8 computes as before without AVX2" ;; esac
fi

# ---- --kv-f16: the attention cache in f16 (CPU; GQA attention layers only) ----
expect_ok "logits --kv-f16" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/kv16.f32" --device cpu --kv-f16
[ -s "$TMP/kv16.f32" ] && ! cmp -s "$TMP/copy.f32" "$TMP/kv16.f32" && pass "--kv-f16 rounds the cache (logits differ)" ||
  fail "--kv-f16 rounds the cache (logits differ)" "the same logits"
expect_ok "generate --kv-f16 (a hybrid: LFM2)" $CINFER generate --model tests/fixtures/lfm2 --prompt-ids 1,2,3 --max-tokens 4 --ids --kv-f16
expect_err "--kv-f16 on DeepSeek's MLA cache" "deepseek_v3: the f16 attention cache (kv_f16, --kv-f16) is not written for this family's cache yet" \
  $CINFER logits --model tests/fixtures/deepseek_v3 --tokens 1,2 --out "$TMP/kvds.f32" --kv-f16
kb32=$($CINFER inspect --model $fx | awk '/^kv_bytes_per_token/ {print $2}')
kb16=$($CINFER inspect --model $fx --kv-f16 | awk '/^kv_bytes_per_token/ {print $2}')
[ -n "$kb32" ] && [ "$kb16" = "$((kb32 / 2))" ] && pass "inspect --kv-f16: half the cache bytes a token ($kb16 of $kb32)" ||
  fail "inspect --kv-f16: half the cache bytes a token" "got '$kb16' of '$kb32'"
expect_usage "--kv-f16 takes no value" "unknown option '1'" $CINFER logits --model $fx --tokens 1 --out "$TMP/bogus.f32" --kv-f16 1
expect_usage "serve --kv-f16 takes no value" "unknown option '1'" timeout 20 $CINFER serve --model $fx --port 0 --kv-f16 1

# ---- no GPU here: --device cuda fails with one line; auto falls back to the CPU ----
if $CINFER logits --model $fx --tokens 1 --out "$TMP/gpu.f32" --device cuda >/dev/null 2>&1; then
  echo "NOTE a CUDA device is usable here: the no-GPU checks are skipped (tests/gpu covers this machine)"
  exit 0
fi
rm -f "$TMP"/gpu.f32*
printf 'keep' >"$TMP/old.f32"
for cmd in "logits --model $fx --tokens 1,2,3 --out $TMP/cuda.f32" "logits --model $fx --tokens 1,2,3 --out $TMP/old.f32 --step" \
           "generate --model $fx --prompt-ids 1,2 --ids" "bench --model $fx --prompt-len 4 --gen 2" \
           "perplexity --model $m --file $TMP/text" "chat --model $fx"; do
  name=${cmd%% *}; case $cmd in *--step*) name="$name --step (over an existing --out)" ;; esac
  expect_err "no GPU: $name --device cuda" "CUDA" $CINFER $cmd --device cuda
done
expect_err "no GPU: serve --device cuda" "CUDA" timeout 20 $CINFER serve --model $fx --port 0 --device cuda
expect_err "no GPU: --no-graphs changes nothing" "CUDA" $CINFER logits --model $fx --tokens 1 --out "$TMP/cuda.f32" --device cuda --no-graphs
left=$(ls "$TMP" | grep -E '^(cuda|gpu)\.f32' )
[ -z "$left" ] && pass "no GPU: no --out file or temp file left" || fail "no GPU: no --out file or temp file left" "$left"
[ "$(cat "$TMP/old.f32")" = keep ] && [ -z "$(ls "$TMP" | grep '^old\.f32\.')" ] && pass "no GPU: an existing --out file is untouched" ||
  fail "no GPU: an existing --out file is untouched" "$(ls -l "$TMP"/old.f32*)"

expect_ok "auto on the CPU" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/auto.f32" --device auto
expect_ok "cpu" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/cpu.f32" --device cpu
expect_ok "default device" $CINFER logits --model $fx --tokens 1,2,3,4,5 --out "$TMP/def.f32"
cmp -s "$TMP/auto.f32" "$TMP/cpu.f32" && cmp -s "$TMP/cpu.f32" "$TMP/def.f32" && [ -s "$TMP/cpu.f32" ] &&
  pass "no GPU: --device auto = --device cpu = default logits" || fail "no GPU: auto = cpu logits" "files differ"
$CINFER generate --model $fx --prompt-ids 1,2,3 --max-tokens 6 --ids --device auto >"$TMP/g.auto" 2>"$TMP/err" &&
  $CINFER generate --model $fx --prompt-ids 1,2,3 --max-tokens 6 --ids --device cpu >"$TMP/g.cpu" 2>>"$TMP/err" &&
  cmp -s "$TMP/g.auto" "$TMP/g.cpu" && pass "no GPU: generate auto = cpu" || fail "no GPU: generate auto = cpu" "$(cat "$TMP/err")"
