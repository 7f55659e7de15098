#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_requests.c (corpus/requests/): one byte for
the route (0 chat completions, 1 completions, 2 Anthropic messages, 3 Responses), then a request body,
valid and broken ones as tests/cli/server.sh sends them. Standard library only."""
import json, os

here = os.path.dirname(os.path.abspath(__file__))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
ATOOLS = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {}}}]
CHAT = [
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
     "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3, "presence_penalty": 0.5, "frequency_penalty": -0.5,
     "stop": ["\n", "x"], "logprobs": True, "top_logprobs": 3, "stream": True, "stream_options": {"include_usage": True}},
    {"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "21"}],
     "tools": TOOLS, "tool_choice": "auto"},
    {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "tool_choice": "none", "response_format": {"type": "json_object"}},
    {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"12": 100, "7": -100}, "max_completion_tokens": 8, "n": 1},
    {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}},
    {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": {
     "$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9}, "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}},
     "required": ["v"], "additionalProperties": False}}, "type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
     "code": {"type": "string", "pattern": "^[A-Z]{2}(-[0-9]+)?$", "maxLength": 8}, "list": {"$ref": "#/$defs/n"}, "tags": {"type": "array",
     "prefixItems": [{"const": "a"}], "items": {"enum": ["x", 1, None]}, "maxItems": 3}, "kind": {"oneOf": [{"type": "string"}, {"type": "number"}]},
     "both": {"allOf": [{"type": "object", "required": ["p"]}, {"properties": {"p": {"type": "boolean"}}}]}}, "required": ["id"]}}}},
    {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "strict": True,
     "parameters": {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}, "required": ["a"], "additionalProperties": False}}}],
     "tool_choice": "required"},
    {"messages": [], "max_tokens": -1},
    {"messages": [{"role": "wizard", "content": 3}], "temperature": "hot", "model": "nope"},
    {"messages": [{"role": "user", "content": "x" * 3000}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": False}},
]
COMPLETIONS = [
    {"prompt": "Once upon", "max_tokens": 8, "temperature": 0},
    {"prompt": [1, 2, 3], "logprobs": 2, "echo": False, "stop": "x"},
    {"prompt": [[5, 6]], "logit_bias": {"3": 1.5}},
    {"prompt": ["a", "b"]},
    {"prompt": [1, -1, 99999999]},
    {"prompt": "", "max_tokens": 100000},
]
MESSAGES = [
    {"model": "demo", "max_tokens": 8, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "demo", "max_tokens": 8, "system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": "w?"},
     {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "Let me check."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21"}]},
      {"type": "text", "text": "and?"}]}], "tools": ATOOLS, "tool_choice": {"type": "any"}, "stop_sequences": ["\n\n"]},
    {"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": ATOOLS, "tool_choice": {"type": "tool", "name": "get_weather"}},
    {"max_tokens": 4, "messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]},
    {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}], "tools": [{"name": 3}]},
    {"messages": [{"role": "user", "content": "no max_tokens"}]},
]
RTOOLS = [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {}}, "strict": True}]
RESPONSES = [
    {"input": "hi", "max_output_tokens": 4, "instructions": "Be brief.", "temperature": 0},
    {"input": [{"role": "user", "content": [{"type": "input_text", "text": "w?"}]}, {"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
               {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": "21"}],
     "tools": RTOOLS, "tool_choice": {"type": "function", "name": "get_weather"}, "stream": True, "store": False},
    {"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}}},
    {"input": "x", "text": {"format": {"type": "json_object"}}, "previous_response_id": "resp_nope"},
    {"input": [{"type": "item_reference", "id": "x"}, 3], "tools": [{"type": "web_search"}], "max_output_tokens": 0},
]


def main():
    out = os.path.join(here, "corpus", "requests")
    os.makedirs(out, exist_ok=True)
    for route, name, reqs in ((0, "chat", CHAT), (1, "completions", COMPLETIONS), (2, "messages", MESSAGES),
                             (3, "responses", RESPONSES)):
        for i, r in enumerate(reqs):
            with open(os.path.join(out, f"{name}_{i:02d}.bin"), "wb") as f:
                f.write(bytes([route]) + json.dumps(r).encode())


if __name__ == "__main__":
    main()
