# Bad flags, bad ids, missing files, broken configs and checkpoints: each ends with exit
# status 1..125 and one line on stderr that names what is wrong.
. "$(dirname "$0")/lib.sh"
fx=tests/fixtures/llama_gqa_llama3

expect_err "no command"          "no command given"             $CINFER
expect_err "unknown command"     "unknown command"   $CINFER frobnicate
expect_err "unknown flag"        "unknown option '--bogus'" $CINFER logits --model $fx --tokens 1 --out $TMP/x --bogus
expect_err "missing --model"     "--model is required" $CINFER logits --tokens 1 --out $TMP/x
expect_err "flag without value"  "--tokens needs a value" $CINFER logits --model $fx --out $TMP/x --tokens
expect_err "bad token list"      "bad entry at 'x"  $CINFER logits --model $fx --tokens 1,x,3 --out $TMP/x
expect_err "negative token"      "bad entry"         $CINFER logits --model $fx --tokens 1,-2 --out $TMP/x
expect_err "token out of range"  "token id 300 at index 1 is outside the vocabulary [0, 300)" $CINFER logits --model $fx --tokens 1,300 --out $TMP/x
expect_err "prompt out of range" "outside the vocabulary" $CINFER generate --model $fx --prompt-ids 99999 --ids
expect_err "bad temperature"     "--temperature expects a number" $CINFER generate --model $fx --prompt-ids 1 --temperature hot --ids
expect_err "bad top-p"           "--top-p expects a number" $CINFER generate --model $fx --prompt-ids 1 --top-p 1.5 --ids
expect_err "bad threads"         "--threads expects an integer" $CINFER logits --model $fx --tokens 1 --out $TMP/x --threads 0
expect_err "missing model dir"   "$TMP/nope/config.json: cannot open" $CINFER inspect --model $TMP/nope
expect_err "unwritable out"      "$TMP/no/dir/x: cannot create" $CINFER logits --model $fx --tokens 1 --out $TMP/no/dir/x

# Config problems: copy a fixture and damage config.json.
mk() { rm -rf "$TMP/m"; mkdir -p "$TMP/m"; cp $fx/model.safetensors "$TMP/m/"; }
mk; echo '{"model_type": "llama", "hidden_size": ' >"$TMP/m/config.json"
expect_err "broken config JSON"  "config.json: invalid JSON" $CINFER inspect --model "$TMP/m"
mk; sed 's/"model_type": "llama"/"model_type": "gpt9"/' $fx/config.json >"$TMP/m/config.json"
expect_err "unknown model_type"  "unknown model_type 'gpt9'; supported: llama, qwen3, qwen3_moe, deepseek_v3" $CINFER inspect --model "$TMP/m"
mk; sed 's/"hidden_size": 64/"hidden_size": 0/' $fx/config.json >"$TMP/m/config.json"
expect_err "zero dim"            "'hidden_size' = 0 is out of range" $CINFER inspect --model "$TMP/m"
mk; sed 's/"num_hidden_layers": 2/"num_hidden_layers": 99999999999/' $fx/config.json >"$TMP/m/config.json"
expect_err "absurd dim"          "'num_hidden_layers' = 99999999999 is out of range" $CINFER inspect --model "$TMP/m"
mk; sed 's/"vocab_size": 300/"vocab_size": "big"/' $fx/config.json >"$TMP/m/config.json"
expect_err "wrong key type"      "'vocab_size' must be an integer" $CINFER inspect --model "$TMP/m"
mk; sed 's/"model_type": "llama"/"model_type": "deepseek_v3_2"/' $fx/config.json >"$TMP/m/config.json"
expect_err "alias names family"  "deepseek_v32: required key 'kv_lora_rank' is missing" $CINFER inspect --model "$TMP/m"
mk; sed 's/"model_type": "llama"/"model_type": "deepseek_v4"/' $fx/config.json >"$TMP/m/config.json"
expect_err "deepseek_v4 config"  "deepseek_v4: required key 'q_lora_rank' is missing" $CINFER inspect --model "$TMP/m"
mk; sed 's/"model_type": "llama"/"model_type": "nemotron_h"/' $fx/config.json >"$TMP/m/config.json"
expect_err "nemotron config"     "nemotron_h: neither layers_block_type nor hybrid_override_pattern is present" $CINFER inspect --model "$TMP/m"
mk; sed 's/"rope_type": "llama3"/"rope_type": "warp"/' $fx/config.json >"$TMP/m/config.json"
expect_err "unknown rope type"   "rope type 'warp' is not supported" $CINFER inspect --model "$TMP/m"

# Checkpoint problems: tensors missing, stray, wrong shape, damaged file.
mk; sed 's/"model_type": "llama"/"model_type": "qwen3"/' $fx/config.json >"$TMP/m/config.json"
expect_err "missing tensor"      "qwen3: required tensor 'model.layers.0.self_attn.q_norm.weight' is missing" $CINFER inspect --model "$TMP/m"
rm -rf "$TMP/q"; mkdir -p "$TMP/q"; cp tests/fixtures/qwen3_tied/* "$TMP/q/"
sed -i 's/"model_type": "qwen3"/"model_type": "llama"/' "$TMP/q/config.json"
expect_err "stray tensor"        "llama: tensor 'model.layers.0.self_attn.k_norm.weight'" $CINFER inspect --model "$TMP/q"
mk; sed 's/"intermediate_size": 112/"intermediate_size": 128/' $fx/config.json >"$TMP/m/config.json"
expect_err "wrong shape"         "tensor 'model.layers.0.mlp.gate_proj.weight' in $TMP/m/model.safetensors has shape [112, 64], expected [128, 64]" $CINFER inspect --model "$TMP/m"
mk; cp $fx/config.json "$TMP/m/"; head -c 5000 $fx/model.safetensors >"$TMP/m/model.safetensors"
expect_err "truncated checkpoint" "$TMP/m/model.safetensors" $CINFER inspect --model "$TMP/m"
mk; cp $fx/config.json "$TMP/m/"; rm "$TMP/m/model.safetensors"
expect_err "no weights"          "$TMP/m" $CINFER inspect --model "$TMP/m"
mk; cp $fx/config.json "$TMP/m/"; printf '\xff\xff\xff\xff\xff\xff\xff\x7f{}' >"$TMP/m/model.safetensors"
expect_err "absurd header length" "$TMP/m/model.safetensors" $CINFER inspect --model "$TMP/m"

# make-random bad input
expect_err "make-random dtype"   "--dtype must be bf16, f32, fp8 or fp8-fp4" $CINFER make-random --config $fx/config.json --out $TMP/r --dtype f8
expect_err "make-random config"  "$TMP/none.json: cannot open" $CINFER make-random --config $TMP/none.json --out $TMP/r
expect_err "make-random threads" "--threads expects an integer in [1, 1024], got '0'" $CINFER make-random --config $fx/config.json --out $TMP/r --threads 0
if [ -w /dev/full ]; then   # a full disk: one line, the workers joined
  expect_err "make-random disk full" "model.safetensors: write failed: No space left on device" \
    bash -c "mkdir -p $TMP/full && ln -sf /dev/full $TMP/full/model.safetensors && exec $CINFER make-random --config $fx/config.json --out $TMP/full"
fi

# transformers 5 saves some hybrid configs without num_hidden_layers: the layer-type list
# gives it; make-random --layers cuts the per-layer lists to match.
nh=tests/fixtures/nemotron_h_hub
rm -rf "$TMP/nh"; mkdir -p "$TMP/nh"; cp $nh/model.safetensors "$TMP/nh/"
grep -v '"num_hidden_layers"' $nh/config.json >"$TMP/nh/config.json"
expect_ok "layers from the pattern" $CINFER inspect --model "$TMP/nh"
grep -q "^layers *7$" "$TMP/out" && pass "layers from the pattern = 7" || fail "layers from the pattern = 7" "$(head -3 "$TMP/out")"
expect_ok "make-random cuts the pattern" $CINFER make-random --config $nh/config.json --out "$TMP/nh2" --layers 2
expect_ok "cut checkpoint loads" $CINFER logits --model "$TMP/nh2" --tokens 1,2 --out "$TMP/nh2.f32"
