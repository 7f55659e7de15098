#!/usr/bin/env python3
"""Reference renders of the models' chat templates, made with Hugging Face transformers.

For every model folder under --tok-root (tokenizer_config.json, optional chat_template.jinja,
optional tokenizer.json or tokenizer.json.gz) and every conversation in --conversations
(OpenAI-style requests: messages, tools, add_generation_prompt, chat_template_kwargs), this
renders the prompt exactly as

    tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=agp,
                                  tokenize=False, **chat_template_kwargs)

and writes --out/<model>.json: for each conversation either {"text": ...} or, when the
template (or transformers) refuses it, {"error": str(exception), "error_type": ...}.
strftime_now() is pinned to 2025-06-15 13:45:30 so the gpt-oss template's date is stable
(tests/unit/test_template.c renders with the same instant). A probe template records which
variables transformers hands the template, so the C side can mirror them.

The tokenizer is loaded with AutoTokenizer when tokenizer.json(.gz) is there; the same
conversations are also rendered through transformers' own template helper
(render_jinja_template) with the tokenizer_config's special tokens, and any disagreement is
reported. With --jinja-only (no transformers needed) it emulates transformers' environment
with plain jinja2, for quick local iteration; such output must not be committed.

Run on the GPU box (see tests/text/tpl_ref/README.md for the exact command).
"""
import argparse
import copy
import datetime as _dt
import gzip
import json
import os
import shutil
import sys
import tempfile
import traceback

FIXED_NOW = _dt.datetime(2025, 6, 15, 13, 45, 30)

PROBE = (
    "{%- for n, v in [('bos_token', bos_token is defined), ('eos_token', eos_token is defined),"
    " ('unk_token', unk_token is defined), ('pad_token', pad_token is defined),"
    " ('sep_token', sep_token is defined), ('cls_token', cls_token is defined),"
    " ('mask_token', mask_token is defined),"
    " ('additional_special_tokens', additional_special_tokens is defined),"
    " ('tools', tools is defined), ('documents', documents is defined),"
    " ('add_generation_prompt', add_generation_prompt is defined),"
    " ('continue_final_message', continue_final_message is defined),"
    " ('enable_thinking', enable_thinking is defined)] -%}"
    "{{ n }}={{ v }};"
    "{%- endfor %}\n"
    "bos={{ bos_token|tojson if bos_token is defined else 'undefined' }}\n"
    "eos={{ eos_token|tojson if eos_token is defined else 'undefined' }}\n"
    "unk={{ unk_token|tojson if unk_token is defined else 'undefined' }}\n"
    "pad={{ pad_token|tojson if pad_token is defined else 'undefined' }}\n"
    "tools={{ tools|tojson if tools is defined else 'undefined' }}\n"
    "documents={{ documents|tojson if documents is defined else 'undefined' }}\n"
    "agp={{ add_generation_prompt|tojson if add_generation_prompt is defined else 'undefined' }}\n"
    "now={{ strftime_now('%Y-%m-%d %H:%M:%S') }}\n"
    "messages={{ messages|tojson }}"
)


def load_requests(conv_dir):
    out = {}
    for fn in sorted(os.listdir(conv_dir)):
        if fn.endswith(".json"):
            with open(os.path.join(conv_dir, fn), encoding="utf-8") as f:
                out[fn[:-5]] = json.load(f)
    return out


def special_tokens(cfg):
    toks = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            toks[k] = v
    return toks


def template_source(model_dir, cfg):
    p = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            return f.read(), "chat_template.jinja"
    return cfg.get("chat_template"), "tokenizer_config.json chat_template"


def pick_named(tpl, tools):
    if isinstance(tpl, list):
        named = {e["name"]: e["template"] for e in tpl}
        if tools is not None and "tool_use" in named:
            return named["tool_use"]
        return named["default"]
    return tpl


def result_of(fn):
    try:
        return {"text": fn()}
    except Exception as ex:  # the template's refusal or a TypeError inside it
        return {"error": str(ex), "error_type": type(ex).__name__}


def jinja_env_render(src, **kw):
    """transformers' environment, rebuilt with plain jinja2 (--jinja-only)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    return env.from_string(src).render(**kw)


def pin_clock():
    """Makes transformers' strftime_now() see FIXED_NOW."""
    import transformers.utils.chat_template_utils as ctu

    class Fixed(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2025, 6, 15, 13, 45, 30)

    if isinstance(getattr(ctu, "datetime", None), type):
        ctu.datetime = Fixed
    else:
        import types
        ctu.datetime = types.SimpleNamespace(datetime=Fixed, **{k: getattr(_dt, k) for k in ("date", "timezone", "timedelta")})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-root", required=True)
    ap.add_argument("--conversations", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jinja-only", action="store_true")
    ap.add_argument("--dump-source", help="write transformers' chat template code here")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    reqs = load_requests(args.conversations)
    meta = {"now": FIXED_NOW.isoformat()}
    helper = None
    if not args.jinja_only:
        import jinja2
        import transformers
        from transformers import AutoTokenizer
        meta["transformers"] = transformers.__version__
        meta["jinja2"] = jinja2.__version__
        pin_clock()
        try:
            from transformers.utils.chat_template_utils import render_jinja_template as helper
        except ImportError:
            helper = None
        if args.dump_source:
            import inspect
            os.makedirs(args.dump_source, exist_ok=True)
            import transformers.utils.chat_template_utils as ctu
            with open(os.path.join(args.dump_source, "chat_template_utils.py"), "w") as f:
                f.write(inspect.getsource(ctu))
            from transformers import PreTrainedTokenizerBase
            with open(os.path.join(args.dump_source, "apply_chat_template.py"), "w") as f:
                f.write(inspect.getsource(PreTrainedTokenizerBase.apply_chat_template))
    else:
        import jinja2
        meta["jinja2"] = jinja2.__version__
        meta["warning"] = "jinja-only emulation: not a transformers reference"

    summary = []
    for name in sorted(os.listdir(args.tok_root)):
        d = os.path.join(args.tok_root, name)
        cfg_path = os.path.join(d, "tokenizer_config.json")
        if not os.path.isfile(cfg_path):
            continue
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        src, src_kind = template_source(d, cfg)
        if src is None:
            print(f"{name}: no chat template, skipped", file=sys.stderr)
            continue
        toks = special_tokens(cfg)
        doc = dict(meta, model=name, template_source=src_kind, probe_template=PROBE, cases={})

        tok = None
        tmp = None
        if not args.jinja_only:
            tj = os.path.join(d, "tokenizer.json")
            tjz = tj + ".gz"
            load_dir = d
            if not os.path.exists(tj) and os.path.exists(tjz):
                tmp = tempfile.mkdtemp()
                for fn in os.listdir(d):
                    if fn != "tokenizer.json.gz":
                        shutil.copy(os.path.join(d, fn), tmp)
                with gzip.open(tjz, "rb") as fi, open(os.path.join(tmp, "tokenizer.json"), "wb") as fo:
                    shutil.copyfileobj(fi, fo)
                load_dir = tmp
            if os.path.exists(os.path.join(load_dir, "tokenizer.json")):
                try:
                    tok = AutoTokenizer.from_pretrained(load_dir)
                    doc["via"] = f"AutoTokenizer ({type(tok).__name__}).apply_chat_template(tokenize=False)"
                    doc["special_tokens_map"] = {k: v for k, v in tok.special_tokens_map.items()}
                except Exception:
                    traceback.print_exc()
                    doc["autotokenizer_error"] = traceback.format_exc(limit=2)
            if tok is None:
                doc["via"] = "transformers.utils.chat_template_utils.render_jinja_template"

        def render(req, chat_template=None, _tok=tok, _src=src, _toks=toks):
            messages = copy.deepcopy(req["messages"])
            tools = copy.deepcopy(req.get("tools"))
            agp = bool(req.get("add_generation_prompt", False))
            kwargs = copy.deepcopy(req.get("chat_template_kwargs") or {})
            if args.jinja_only:
                t = chat_template or pick_named(_src, tools)
                return jinja_env_render(t, **{**_toks, **kwargs}, messages=messages, tools=tools,
                                        documents=None, add_generation_prompt=agp)
            if _tok is not None:
                kw = dict(kwargs)
                if chat_template is not None:
                    kw["chat_template"] = chat_template
                return _tok.apply_chat_template(messages, tools=tools, add_generation_prompt=agp,
                                                tokenize=False, **kw)
            t = chat_template or pick_named(_src, tools)
            rendered, _ = helper(conversations=[messages], tools=tools, documents=None, chat_template=t,
                                 add_generation_prompt=agp, **{**_toks, **kwargs})
            return rendered[0]

        probe_req = {"messages": [{"role": "user", "content": "probe"}], "add_generation_prompt": True}
        doc["probe"] = result_of(lambda: render(probe_req, chat_template=PROBE))
        doc["probe_with_tools"] = result_of(lambda: render(dict(probe_req, tools=[{"type": "function", "function": {"name": "f"}}]), chat_template=PROBE))
        disagree = []
        for cname, req in reqs.items():
            res = result_of(lambda: render(req))
            doc["cases"][cname] = res
            if not args.jinja_only and tok is not None and helper is not None:
                alt = result_of(lambda: helper(conversations=[copy.deepcopy(req["messages"])],
                                               tools=copy.deepcopy(req.get("tools")), documents=None,
                                               chat_template=pick_named(src, req.get("tools")),
                                               add_generation_prompt=bool(req.get("add_generation_prompt", False)),
                                               **{**toks, **(req.get("chat_template_kwargs") or {})})[0][0])
                if alt.get("text") != res.get("text") or ("error" in alt) != ("error" in res):
                    disagree.append(cname)
        if disagree:
            doc["helper_disagrees"] = disagree
        n_err = sum(1 for v in doc["cases"].values() if "error" in v)
        summary.append(f"{name}: {len(doc['cases']) - n_err} rendered, {n_err} refused"
                       + (f", helper disagrees on {disagree}" if disagree else ""))
        with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(summary))


if __name__ == "__main__":
    main()
