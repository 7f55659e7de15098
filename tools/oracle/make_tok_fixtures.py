#!/usr/bin/env python3
"""make_tok_fixtures.py — reference token ids for cinfer's tokenizer tests (GPU box).

Reads each <name>/tokenizer.json (+ tokenizer_config.json) under --tok-root and the texts
of tests/text/corpus.json, and writes --out/<name>.json:
  {"name", "versions", "add_bos", "add_eos",
   "cases": [{"ids": [...],            encode(text, add_special_tokens=False)
              "ids_special": [...],    only when it differs from ids (see below)
              "decoded": "...",        decode(ids, skip_special_tokens=False)
              "decoded_special": "...",only when ids_special differs from ids
              "roundtrip": bool}],     decoded == text
   "decode_cases": [{"ids": [...], "decoded": "..."}]}   random id runs, byte pieces
cases[i] belongs to corpus texts[i].

Which Hugging Face: the reference is the `tokenizers` library on tokenizer.json, as
transformers 4.x and PreTrainedTokenizerFast use it. transformers 5's AutoTokenizer
rebuilds "LlamaTokenizerFast" files with a Metaspace pre-tokenizer and breaks byte-level
files such as DeepSeek V3's (transformers issue 45488), so it is not the oracle; the
script still measures how often it agrees and prints that (--diag).
add_special_tokens=True follows transformers 4's fast tokenizers: when tokenizer_config
sets add_bos_token / add_eos_token, BOS/EOS are added around the text by those flags
(LlamaTokenizerFast and GemmaTokenizerFast rebuild the post-processor from them);
otherwise tokenizer.json's post_processor decides.

--bench FILE also times single-threaded encode of FILE's text (one call on the whole
text, and one call per line) and prints MB/s per tokenizer.

Usage: python3 make_tok_fixtures.py --tok-root DIR --corpus tests/text/corpus.json
                                    --out DIR [--diag FILE] [--bench FILE] [name ...]
"""
import argparse
import json
import os
import random
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

NAMES = ["deepseek_v3", "qwen3", "llama3", "llama2", "gemma3", "gptoss"]


def tok_content(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def special_ids(tok, cfg, ids0, text):
    """ids with add_special_tokens=True, as transformers 4's fast tokenizers give them."""
    if "add_bos_token" in cfg or "add_eos_token" in cfg:
        out = list(ids0)
        if cfg.get("add_bos_token"):
            b = tok_content(cfg.get("bos_token"))
            if b is not None and tok.token_to_id(b) is not None:
                out = [tok.token_to_id(b)] + out
        if cfg.get("add_eos_token"):
            e = tok_content(cfg.get("eos_token"))
            if e is not None and tok.token_to_id(e) is not None:
                out = out + [tok.token_to_id(e)]
        return out
    return tok.encode(text, add_special_tokens=True).ids


def decode_cases(tok, rng):
    """Random id runs (added tokens included) and runs of byte pieces, for decode."""
    vocab = tok.get_vocab_size(with_added_tokens=True)
    cases = []
    for _ in range(24):
        n = rng.randint(1, 12)
        cases.append([rng.randrange(vocab) for _ in range(n)])
    # Byte pieces: <0xNN> (byte fallback) or the byte-level alphabet, cut UTF-8 included.
    byte_ids = [tok.token_to_id("<0x%02X>" % b) for b in range(256)]
    if all(i is not None for i in byte_ids):
        for s in ["中文", "é", "😀", "a\xe9b"]:
            bs = s.encode("utf-8")
            cases.append([byte_ids[b] for b in bs])
            cases.append([byte_ids[b] for b in bs[:-1]])
        cases.append([byte_ids[0xff], byte_ids[0x41]])
        cases.append([byte_ids[0xe4], byte_ids[0x41], byte_ids[0xb8]])
    else:
        for s in ["中文", "😀", "é"]:
            ids = tok.encode(s, add_special_tokens=False).ids
            cases.append(ids)
        # Single ids of high byte-level symbols cut UTF-8 apart.
        for sym in ["\u00e4", "\u00b8", "\u00f0\u0141"]:
            i = tok.token_to_id(sym)
            if i is not None:
                cases.append([i])
        for s in ["中", "😀"]:
            bs = s.encode("utf-8")
            b2u = bytes_to_unicode()
            pieces = [tok.token_to_id(b2u[b]) for b in bs]
            if all(p is not None for p in pieces):
                cases.append(pieces[:-1])
                cases.append(pieces[1:])
    return [{"ids": c, "decoded": tok.decode(c, skip_special_tokens=False)} for c in cases]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def diag_transformers(d, texts, cases):
    """How often transformers 5 agrees with the tokenizers-library reference."""
    out = {}
    try:
        import transformers
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        out["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e)}
    for label, ctor in [("AutoTokenizer", lambda: AutoTokenizer.from_pretrained(d)),
                        ("PreTrainedTokenizerFast",
                         lambda: PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json")))]:
        try:
            t = ctor()
            same0 = same1 = 0
            first_diff = None
            for text, c in zip(texts, cases):
                a = t(text, add_special_tokens=False)["input_ids"]
                b = t(text, add_special_tokens=True)["input_ids"]
                if a == c["ids"]:
                    same0 += 1
                elif first_diff is None:
                    first_diff = {"text": text[:80], "ref": c["ids"][:20], "got": a[:20]}
                if b == c.get("ids_special", c["ids"]):
                    same1 += 1
            out[label] = {"class": type(t).__name__, "same_ids": same0, "same_ids_special": same1,
                          "n": len(texts), "first_diff": first_diff}
        except Exception as e:  # noqa: BLE001
            out[label] = {"error": repr(e)[:300]}
    return out


def bench(tok, path, text, name):
    lines = text.split("\n")
    nbytes = len(text.encode("utf-8"))
    tok.encode(text, add_special_tokens=False)  # warm the word cache like a server would
    res = {}
    for label, fn in [("doc", lambda: tok.encode(text, add_special_tokens=False)),
                      ("lines", lambda: [tok.encode(ln, add_special_tokens=False) for ln in lines])]:
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        res[label] = nbytes / best / 1e6
    t0 = time.perf_counter()
    Tokenizer.from_file(path)
    res["load_ms"] = (time.perf_counter() - t0) * 1e3
    print("bench hf %-12s doc %.2f MB/s  lines %.2f MB/s  load %.0f ms  (%d bytes)" %
          (name, res["doc"], res["lines"], res["load_ms"], nbytes), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-root", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--diag")
    ap.add_argument("--bench")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    texts = json.load(open(a.corpus, encoding="utf-8"))["texts"]
    os.makedirs(a.out, exist_ok=True)
    diag = {}
    for name in a.names or NAMES:
        d = os.path.join(a.tok_root, name)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
        cases = []
        for text in texts:
            ids0 = tok.encode(text, add_special_tokens=False).ids
            ids1 = special_ids(tok, cfg, ids0, text)
            dec = tok.decode(ids0, skip_special_tokens=False)
            c = {"ids": ids0, "decoded": dec, "roundtrip": dec == text}
            if ids1 != ids0:
                c["ids_special"] = ids1
                c["decoded_special"] = tok.decode(ids1, skip_special_tokens=False)
            cases.append(c)
        rng = random.Random(sum(map(ord, name)))
        ref = {"name": name,
               "versions": {"tokenizers": tokenizers.__version__},
               "add_bos": bool(cfg.get("add_bos_token")), "add_eos": bool(cfg.get("add_eos_token")),
               "cases": cases, "decode_cases": decode_cases(tok, rng)}
        path = os.path.join(a.out, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))
        rt = sum(c["roundtrip"] for c in cases)
        print("%-12s %d texts, %d round-trip, %d bytes" % (name, len(cases), rt, os.path.getsize(path)),
              flush=True)
        info = {"roundtrip": rt}
        if a.diag:
            info.update(diag_transformers(d, texts, cases))
            print("   ", json.dumps(info, ensure_ascii=False)[:600], flush=True)
        if a.bench:
            info["bench"] = bench(tok, os.path.join(d, "tokenizer.json"), open(a.bench, encoding="utf-8", newline="").read(), name)
        diag[name] = info
    if a.diag:
        with open(a.diag, "w", encoding="utf-8") as f:
            json.dump(diag, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    sys.exit(main())
