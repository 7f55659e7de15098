#!/usr/bin/env bash
# `cinfer template --model DIR --request F.json` end to end: exact bytes on stdout (no added
# newline) for real model templates, and one clear stderr line with a non-zero exit for bad
# input (missing or invalid request file, messages not a list, a template that refuses the
# conversation, a folder without a template). Needs the real tokenizer configs in
# .cache/tokenizers (scripts/fetch-tokenizers.sh). Prints PASS/FAIL lines (tests/run.sh).
cd "$(dirname "$0")/../.." || exit 1
source tests/cli/lib.sh
TOK=.cache/tokenizers
CONV=tests/text/conversations

if ! "$CINFER" template --help >/dev/null 2>&1; then
  fail template_command "'$CINFER template' is not available (wire cmd_template into apps/cinfer.c)"
  exit 0
fi
for m in qwen3 llama3 gemma3 gptoss; do
  if [ ! -f "$TOK/$m/tokenizer_config.json" ]; then
    fail "template_$m" "$TOK/$m/tokenizer_config.json is missing: run scripts/fetch-tokenizers.sh"
    exit 0
  fi
done

# expect_bytes NAME EXPECTED_FILE CMD...: CMD exits 0 and prints exactly the file's bytes.
expect_bytes() {
  local name=$1 want=$2; shift 2
  if ! "$@" >"$TMP/got" 2>"$TMP/err"; then fail "$name" "exit $?: $(head -c 300 "$TMP/err")"; return; fi
  if cmp -s "$want" "$TMP/got"; then pass "$name"
  else fail "$name" "output differs: want $(od -c "$want" | head -3 | tr -s ' ' | tr '\n' ' ') got $(od -c "$TMP/got" | head -3 | tr -s ' ' | tr '\n' ' ')"; fi
}

printf '%s' $'<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n' >"$TMP/qwen3_01"
expect_bytes template_qwen3_single_user "$TMP/qwen3_01" "$CINFER" template --model "$TOK/qwen3" --request "$CONV/01_single_user.json"

printf '%s' $'<|im_start|>user\nQuick: is 17 prime?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' >"$TMP/qwen3_09"
expect_bytes template_qwen3_thinking_off "$TMP/qwen3_09" "$CINFER" template --model "$TOK/qwen3" --request "$CONV/09_thinking_off.json"

printf '%s' $'<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nName a prime number.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' >"$TMP/llama3_05"
expect_bytes template_llama3_system "$TMP/llama3_05" "$CINFER" template --model "$TOK/llama3" --request "$CONV/05_no_gen_prompt.json"

printf '%s' $'<bos><start_of_turn>user\nYou describe images.\n\n<start_of_image>What is in this picture?<end_of_turn>\n<start_of_turn>model\n' >"$TMP/gemma3_13"
expect_bytes template_gemma3_content_parts "$TMP/gemma3_13" "$CINFER" template --model "$TOK/gemma3" --request "$CONV/13_content_parts.json"

# gpt-oss (its template is committed, the npm package has none): today's date, local time
mkdir -p "$TMP/gptoss"
cp "$TOK/gptoss/tokenizer_config.json" "$TMP/gptoss/"
cp tests/text/tpl_ref/gptoss.chat_template.jinja "$TMP/gptoss/chat_template.jinja"
printf '%s' "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06
Current date: $(date +%Y-%m-%d)

Reasoning: medium

# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>Hello!<|end|><|start|>assistant" >"$TMP/gptoss_01"
expect_bytes template_gptoss_date "$TMP/gptoss_01" "$CINFER" template --model "$TMP/gptoss" --request "$CONV/01_single_user.json"

# bad input
expect_err template_missing_request "no-such-request.json" "$CINFER" template --model "$TOK/qwen3" --request "$TMP/no-such-request.json"
printf '{"messages": [' >"$TMP/bad.json"
expect_err template_invalid_json "invalid JSON" "$CINFER" template --model "$TOK/qwen3" --request "$TMP/bad.json"
printf '{"messages": {"role": "user", "content": "hi"}}' >"$TMP/notlist.json"
expect_err template_messages_not_list "must be a list" "$CINFER" template --model "$TOK/qwen3" --request "$TMP/notlist.json"
printf '{"add_generation_prompt": true}' >"$TMP/nomsg.json"
expect_err template_messages_missing "missing \"messages\"" "$CINFER" template --model "$TOK/qwen3" --request "$TMP/nomsg.json"
expect_err template_raises "Conversation roles must alternate" "$CINFER" template --model "$TOK/gemma3" --request "$CONV/14_bad_alternation.json"
expect_err template_type_error "line" "$CINFER" template --model "$TOK/qwen3" --request "$CONV/07_tool_call_null_content.json"
mkdir -p "$TMP/empty"
expect_err template_no_template "no chat template" "$CINFER" template --model "$TMP/empty" --request "$CONV/01_single_user.json"
expect_err template_no_model_dir "not a directory" "$CINFER" template --model "$TMP/nowhere" --request "$CONV/01_single_user.json"
expect_err template_usage_model "--model is required" "$CINFER" template --request "$CONV/01_single_user.json"
expect_err template_usage_unknown "unknown option" "$CINFER" template --model "$TOK/qwen3" --request "$CONV/01_single_user.json" --bogus
"$CINFER" template --request "$CONV/01_single_user.json" >/dev/null 2>&1
if [ $? -eq 2 ]; then pass template_usage_status; else fail template_usage_status "usage errors must exit 2"; fi
