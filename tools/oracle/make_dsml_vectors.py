#!/usr/bin/env python3
"""make_dsml_vectors.py -- test vectors for cinfer's native DeepSeek V3.2 / V4 prompt encoders.

DeepSeek-V3.2 and DeepSeek-V4 ship no Jinja chat template; their checkpoints carry a Python
encoder instead (encoding/encoding_dsv32.py, encoding/encoding_dsv4.py). This script imports
those official files from paths given on the command line (they are NOT part of this
repository), runs them on the conversations defined below and writes what they produce:

  encode  {"encoder": "v32"|"v4", "messages", "thinking_mode", "drop_thinking",
           "add_default_bos_token", "reasoning_effort" (v4), "prompt"}
          prompt = encode_messages(messages, ...), the exact string.
  parse   {"encoder", "thinking_mode", "text", "reasoning_content", "content", "tool_calls"}
          text = the completion the encoder writes for one assistant turn (what the model
          would generate after the prompt); the other fields are what the official
          parse_message_from_completion_text returns for it.
  error   {"encoder", "messages", "thinking_mode", "field"}: inputs the official encoder
          refuses (it raises); cinfer must refuse them too, naming `field` in its message.
Beside the hand-written conversations, --random N adds N random ones (seeded; roles, tools,
calls with arguments of every JSON type, results, reasoning, modes, drop / keep, BOS, V4
effort): their prompts, or a refusal (field "messages") where the official encoder raises.

Usage (where the encoders were checked out, outside the repository):
  python3 tools/oracle/make_dsml_vectors.py --v32 /path/encoding_dsv32.py \
      --v4 /path/encoding_dsv4.py --out tests/text/dsml_vectors.json

The vectors committed in tests/text/dsml_vectors.json were made from the files named in its
"source" entry (see README, "DeepSeek V3.2 / V4 prompts"). Only the standard library is used.
"""
import argparse
import copy
import hashlib
import importlib.util
import json
import random
import sys


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---------------------------------------------------------------- shared material

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web (résumé, naïve, 東京 all fine)",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "top_k": {"type": "integer", "default": 5},
        "filters": {"type": "object"}, "exact": {"type": "boolean"}, "ratio": {"type": "number"}}}}}
NOARGS = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CALL_W = call("call_1", "get_weather", json.dumps({"city": "Paris", "unit": "celsius"}))
CALL_S = call("call_2", "search", json.dumps(
    {"query": "tour \"Eiffel\"\nheight", "top_k": 3, "filters": {"lang": ["fr", "en"], "since": None},
     "exact": True, "ratio": 0.25, "big": 1e20, "tiny": 1.5e-07, "whole": 100.0, "neg": -7,
     "uni": "東京 — ok", "ctl": "tab\there\u0001"}, ensure_ascii=False))
CALL_N = call("call_3", "now", "{}")

SYS = {"role": "system", "content": "You are a helpful assistant."}


def with_tools(msgs, tools, rf=None):
    msgs = copy.deepcopy(msgs)
    if msgs and msgs[0]["role"] in ("system", "developer"):
        msgs[0]["tools"] = tools
    else:
        msgs.insert(0, {"role": "system", "content": "", "tools": tools})
    if rf is not None:
        msgs[0]["response_format"] = rf
    return msgs


PLAIN = [SYS, {"role": "user", "content": "Hello!"}]
MULTI = [SYS,
         {"role": "user", "content": "What is 2+2?"},
         {"role": "assistant", "content": "4.", "reasoning_content": "Simple: 2+2=4."},
         {"role": "user", "content": "And 3+3?"},
         {"role": "assistant", "content": "6.", "reasoning_content": "3+3 is 6."},
         {"role": "user", "content": "Thanks. Say bye in French."}]
MULTI_END_ASSISTANT = MULTI + [{"role": "assistant", "content": "Au revoir !", "reasoning_content": "French: au revoir."}]
TOOLS_CONV = [
    {"role": "system", "content": "Use tools when useful."},
    {"role": "user", "content": "Weather in Paris, and search for the Eiffel tower?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two tools needed.", "tool_calls": [CALL_W, CALL_S]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "330 m tall."},
    {"role": "assistant", "content": "It is 21 °C and clear; the tower is 330 m.", "reasoning_content": "Combine both."},
    {"role": "user", "content": "What time is it?"},
    {"role": "assistant", "content": None, "reasoning_content": "Call now.", "tool_calls": [CALL_N]},
    {"role": "tool", "tool_call_id": "call_3", "content": "12:00"},
]
TOOLS_CONV_DONE = TOOLS_CONV + [{"role": "assistant", "content": "It is noon.", "reasoning_content": "Got it."}]
TOOLS_OPEN = [{"role": "user", "content": "Weather in Paris?"}]


def cases_v32():
    out = []
    for mode in ("chat", "thinking"):
        out.append(dict(messages=PLAIN, thinking_mode=mode))
        out.append(dict(messages=[{"role": "user", "content": "hi"}], thinking_mode=mode))
        out.append(dict(messages=MULTI, thinking_mode=mode))
        out.append(dict(messages=MULTI, thinking_mode=mode, drop_thinking=False))
        out.append(dict(messages=MULTI_END_ASSISTANT, thinking_mode=mode))
        out.append(dict(messages=with_tools(TOOLS_CONV, [WEATHER, SEARCH, NOARGS]), thinking_mode=mode))
        out.append(dict(messages=with_tools(TOOLS_CONV_DONE, [WEATHER, SEARCH, NOARGS]), thinking_mode=mode))
        out.append(dict(messages=with_tools(TOOLS_CONV, [WEATHER, SEARCH, NOARGS]), thinking_mode=mode, drop_thinking=False))
        out.append(dict(messages=with_tools(TOOLS_OPEN, [WEATHER]), thinking_mode=mode))
        out.append(dict(messages=with_tools(PLAIN, [WEATHER], rf={"type": "json_object"}), thinking_mode=mode))
        out.append(dict(messages=[{"role": "developer", "content": "Find the weather.", "tools": [WEATHER],
                                   "response_format": {"type": "json_schema", "schema": {"x": 1.0}}}],
                        thinking_mode=mode))
    out.append(dict(messages=PLAIN, thinking_mode="thinking", add_default_bos_token=False))
    out.append(dict(messages=[{"role": "system", "content": "A \"quoted\" 東京 system\nwith lines"},
                              {"role": "user", "content": "emoji 🙂 and \\ backslash"}], thinking_mode="chat"))
    return out


def cases_v4():
    out = []
    tool_multi = with_tools(TOOLS_CONV, [WEATHER, SEARCH, NOARGS])
    # results out of call order (sorted back by id), then a user text merged into the same turn
    swapped = copy.deepcopy(tool_multi)
    swapped[3], swapped[4] = swapped[4], swapped[3]
    followup = copy.deepcopy(tool_multi[:6]) + [{"role": "user", "content": "Also: anything else?"}]
    for mode in ("chat", "thinking"):
        out.append(dict(messages=PLAIN, thinking_mode=mode))
        out.append(dict(messages=[{"role": "user", "content": "hi"}], thinking_mode=mode))
        out.append(dict(messages=MULTI, thinking_mode=mode))
        out.append(dict(messages=MULTI, thinking_mode=mode, drop_thinking=False))
        out.append(dict(messages=MULTI_END_ASSISTANT, thinking_mode=mode))
        out.append(dict(messages=tool_multi, thinking_mode=mode))
        out.append(dict(messages=with_tools(TOOLS_CONV_DONE, [WEATHER, SEARCH, NOARGS]), thinking_mode=mode))
        out.append(dict(messages=swapped, thinking_mode=mode))
        out.append(dict(messages=followup, thinking_mode=mode))
        out.append(dict(messages=with_tools(TOOLS_OPEN, [WEATHER]), thinking_mode=mode))
        out.append(dict(messages=with_tools(PLAIN, [WEATHER], rf={"type": "json_object"}), thinking_mode=mode))
        out.append(dict(messages=[{"role": "developer", "content": "Find the weather.", "tools": [WEATHER]},
                                  {"role": "latest_reminder", "content": "Date: 2026-12-01"}], thinking_mode=mode))
        out.append(dict(messages=[SYS, {"role": "latest_reminder", "content": "Locale: fr-FR"},
                                  {"role": "user", "content": "Bonjour"}], thinking_mode=mode))
        out.append(dict(messages=[SYS, {"role": "user", "content": "Should I search for this?", "task": "action"}],
                        thinking_mode=mode))
        out.append(dict(messages=[{"role": "user", "content": "Paris facts", "task": "query"}], thinking_mode=mode))
        out.append(dict(messages=[{"role": "user", "content": "Hello"},
                                  {"role": "assistant", "content": "Hi!", "reasoning_content": "greet", "task": "title"},
                                  {"role": "assistant", "content": "Greeting"}], thinking_mode=mode))
        out.append(dict(messages=[{"role": "user", "content": "Go on"},
                                  {"role": "assistant", "content": "Partial", "reasoning_content": "r", "wo_eos": True}],
                        thinking_mode=mode))
        out.append(dict(messages=with_tools([{"role": "user", "content": "x"},
                                             {"role": "assistant", "content": "", "reasoning_content": "r",
                                              "tool_calls": [call("c9", "now", "not json at all")]},
                                             {"role": "tool", "tool_call_id": "c9", "content": [
                                                 {"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}],
                                            [NOARGS]), thinking_mode=mode))
    for effort in ("max", "high"):
        for mode in ("chat", "thinking"):
            out.append(dict(messages=PLAIN, thinking_mode=mode, reasoning_effort=effort))
    out.append(dict(messages=PLAIN, thinking_mode="thinking", add_default_bos_token=False))
    out.append(dict(messages=[{"role": "system", "content": "A \"quoted\" 東京 system\nwith lines"},
                              {"role": "user", "content": "emoji 🙂 and \\ backslash"}], thinking_mode="chat"))
    return out


# turns to parse back: (user text, assistant message)
PARSE_TURNS = [
    {"role": "assistant", "content": "Plain answer.", "reasoning_content": "Short thought."},
    {"role": "assistant", "content": "", "reasoning_content": "Need tools.", "tool_calls": [CALL_W, CALL_S]},
    {"role": "assistant", "content": "Let me check.", "reasoning_content": "One call.", "tool_calls": [CALL_N]},
    {"role": "assistant", "content": "Multi\nline\n\nanswer with 東京.", "reasoning_content": "Line one.\nLine two."},
]


def errors_v32():
    return [
        (dict(messages=[{"role": "user", "content": "x"}, {"role": "tool", "content": "orphan"}], thinking_mode="chat"), "messages[1]"),
        (dict(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "a", "tool_calls": [CALL_N]},
                        {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}], thinking_mode="chat"), "messages[3]"),
        (dict(messages=[{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}], thinking_mode="chat"), "messages[1].role"),
        (dict(messages=[{"role": "developer", "content": ""}], thinking_mode="chat"), "messages[0].content"),
        (dict(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], thinking_mode="thinking"), "messages[1]"),
        (dict(messages=[{"role": "user", "content": "x"},
                        {"role": "assistant", "content": "", "tool_calls": [call("c", "f", "{bad json")]}],
              thinking_mode="chat"), "messages[1].tool_calls[0].function.arguments"),
    ]


def errors_v4():
    return [
        (dict(messages=[{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}], thinking_mode="chat"), "messages[1].role"),
        (dict(messages=[{"role": "developer", "content": ""}], thinking_mode="chat"), "messages[0].content"),
        (dict(messages=[{"role": "user", "content": "x", "task": "dance"}], thinking_mode="chat"), "messages[0].task"),
        (dict(messages=PLAIN, thinking_mode="thinking", reasoning_effort="low"), "reasoning_effort"),
        (dict(messages=[{"role": "user", "content": "x"},
                        {"role": "assistant", "content": "", "tool_calls": [call("c", "f", "[1, 2]")]}],
              thinking_mode="chat"), "messages[1].tool_calls[0].function.arguments"),
    ]


# ---------------------------------------------------------------- random conversations

def random_cases(seed, n):
    """n random conversations (roles, tools, calls with arguments of every JSON type, results,
    reasoning, both modes, drop / keep, BOS or not, V4 effort), for both encoders."""
    R = random.Random(seed)
    texts = ["hi", "", "multi\nline", "東京 🙂", "q\"uote\\", "tab\there", "xxx"]

    def val(d=0):
        c = R.randrange(9 if d < 2 else 6)
        if c == 0: return R.randrange(-5, 100)
        if c == 1: return R.random() * 10 ** R.randrange(-8, 22)
        if c == 2: return R.choice(texts)
        if c == 3: return True
        if c == 4: return None
        if c == 5: return False
        if c == 6: return [val(d + 1) for _ in range(R.randrange(3))]
        if c == 7: return {f"k{i}": val(d + 1) for i in range(R.randrange(3))}
        return 0.0

    tools = [{"type": "function", "function": {"name": f"f{i}", "description": R.choice(texts),
                                               "parameters": {"type": "object", "properties": {"a": {"type": "number", "default": 1.5}}}}}
             for i in range(3)]
    out = []
    for _ in range(n):
        enc = R.choice(["v32", "v4"])
        msgs, cid, open_calls = [], 0, 0
        if R.random() < 0.6:
            msgs.append({"role": "system", "content": R.choice(texts + [None])})
        for _ in range(R.randrange(1, 9)):
            role = R.choice(["user", "user", "assistant", "assistant", "tool", "developer"] + (["latest_reminder"] if enc == "v4" else []))
            m = {"role": role}
            if role == "tool":
                if not open_calls or msgs[-1]["role"] not in ("assistant", "tool"):
                    continue
                m["content"], m["tool_call_id"] = R.choice(texts), f"c{R.randrange(cid + 1)}"
                open_calls -= 1
            elif role == "assistant":
                m["content"] = R.choice(texts + [None])
                if R.random() < 0.7:
                    m["reasoning_content"] = R.choice(texts)
                open_calls = 0
                if R.random() < 0.4:
                    m["tool_calls"] = []
                    for _ in range(R.randrange(1, 3)):
                        cid += 1
                        args = json.dumps({f"p{j}": val() for j in range(R.randrange(4))}, ensure_ascii=R.random() < 0.5)
                        m["tool_calls"].append({"id": f"c{cid}", "type": "function", "function": {"name": f"f{R.randrange(3)}", "arguments": args}})
                    open_calls = len(m["tool_calls"])
            else:
                m["content"] = R.choice(texts[:1] + texts[2:]) if role == "developer" else R.choice(texts)
                open_calls = 0
            msgs.append(m)
        if not msgs:
            msgs = [{"role": "user", "content": "x"}]
        if msgs[0]["role"] == "system" and R.random() < 0.5:
            msgs[0]["tools"] = tools[:R.randrange(1, 4)]
            if R.random() < 0.3:
                msgs[0]["response_format"] = {"type": "json_object", "x": val()}
        case = dict(messages=msgs, thinking_mode=R.choice(["chat", "thinking"]), drop_thinking=R.random() < 0.7,
                    add_default_bos_token=R.random() < 0.9)
        if enc == "v4":
            case["reasoning_effort"] = R.choice([None, None, "max", "high"])
        out.append((enc, case))
    return out


def run_encode(mod, enc, case):
    kw = dict(thinking_mode=case["thinking_mode"], drop_thinking=case.get("drop_thinking", True),
              add_default_bos_token=case.get("add_default_bos_token", True))
    if enc == "v4":
        kw["reasoning_effort"] = case.get("reasoning_effort")
    return mod.encode_messages(copy.deepcopy(case["messages"]), **kw)


def vector(enc, case, prompt):
    v = {"encoder": enc, "messages": case["messages"], "thinking_mode": case["thinking_mode"],
         "drop_thinking": case.get("drop_thinking", True),
         "add_default_bos_token": case.get("add_default_bos_token", True)}
    if enc == "v4":
        v["reasoning_effort"] = case.get("reasoning_effort")
    v["prompt"] = prompt
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--v32", required=True, help="path of the official encoding_dsv32.py")
    ap.add_argument("--v4", required=True, help="path of the official encoding_dsv4.py")
    ap.add_argument("--v32-source", default="", help="where the V3.2 file came from (recorded)")
    ap.add_argument("--v4-source", default="", help="where the V4 file came from (recorded)")
    ap.add_argument("--random", type=int, default=120, help="random conversations to add (default 120)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    mods = {"v32": load(a.v32, "official_dsv32"), "v4": load(a.v4, "official_dsv4")}
    doc = {"source": {"v32": {"file": a.v32_source, "sha256": sha256(a.v32)},
                      "v4": {"file": a.v4_source, "sha256": sha256(a.v4)}},
           "encode": [], "parse": [], "error": []}
    for enc, cases in (("v32", cases_v32()), ("v4", cases_v4())):
        for c in cases:
            doc["encode"].append(vector(enc, c, run_encode(mods[enc], enc, c)))
        for mode in ("chat", "thinking"):
            for turn in PARSE_TURNS:
                user = [{"role": "user", "content": "Go."}]
                tools = [WEATHER, SEARCH, NOARGS]
                head = run_encode(mods[enc], enc, dict(messages=with_tools(user, tools), thinking_mode=mode))
                full = run_encode(mods[enc], enc, dict(messages=with_tools(user + [turn], tools), thinking_mode=mode))
                assert full.startswith(head)
                text = full[len(head):]
                p = mods[enc].parse_message_from_completion_text(text, thinking_mode=mode)
                doc["parse"].append({"encoder": enc, "thinking_mode": mode, "text": text,
                                     "reasoning_content": p.get("reasoning_content", p.get("reasoning", "")),
                                     "content": p["content"],
                                     "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                                                    for t in p["tool_calls"]]})
        for c, field in (errors_v32() if enc == "v32" else errors_v4()):
            try:
                run_encode(mods[enc], enc, c)
            except Exception:
                doc["error"].append({"encoder": enc, "messages": c["messages"], "thinking_mode": c["thinking_mode"],
                                     "reasoning_effort": c.get("reasoning_effort"), "field": field})
                continue
            sys.exit(f"the official {enc} encoder accepted an error case: {c}")
    # random conversations: what the encoders write, or (when they raise) a refusal
    for enc, c in random_cases(a.seed, a.random):
        try:
            doc["encode"].append(vector(enc, c, run_encode(mods[enc], enc, c)))
        except Exception:
            doc["error"].append({"encoder": enc, "messages": c["messages"], "thinking_mode": c["thinking_mode"],
                                 "drop_thinking": c["drop_thinking"], "reasoning_effort": c.get("reasoning_effort"),
                                 "field": "messages"})
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{a.out}: {len(doc['encode'])} prompts, {len(doc['parse'])} parses, {len(doc['error'])} refusals")


if __name__ == "__main__":
    main()
