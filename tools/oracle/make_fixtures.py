#!/usr/bin/env python3
"""Makes cinfer's parity fixtures with Hugging Face transformers (run on the GPU box).

For each fixture: build a tiny model from a config with AutoConfig.for_model +
AutoModelForCausalLM.from_config, re-initialise every parameter with real spread
(matrices ~ N(0, 1/fan_in), norms 1 +- 0.15, embeddings ~ N(0, 0.7^2), biases ~ N(0, 0.1^2))
because the default 0.02 init hides wrong formulas, save it with save_pretrained, then
compute the reference in float64 on the CPU:
  ref_logits.f32  float32 little-endian [T, vocab], logits of model(tokens) in float64
  ref.json        tokens, greedy prompt + greedy continuation (generate, do_sample=False),
                  the smallest top-1 margin seen while generating, versions.
A bf16 fixture stores bf16 weights and the reference is computed from exactly those
weights upcast to float64.

Usage: python3 make_fixtures.py OUT_DIR [name ...]
"""
import json
import math
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

SEED = 1234
T_PROMPT = 24        # tokens for the logits reference
GREEDY_PROMPT = 8    # tokens of the greedy prompt
GREEDY_NEW = 16      # tokens generated greedily

BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            pad_token_id=0)


def fixture_specs():
    """name -> (model_type, config kwargs, options)."""
    s = {}
    s["llama_gqa_llama3"] = ("llama", dict(BASE, tie_word_embeddings=False, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=64)), {})
    s["llama_yarn"] = ("llama", dict(BASE, num_key_value_heads=4, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                             original_max_position_embeddings=128)), {})
    s["llama_hub_dialect"] = ("llama", dict(BASE, num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=32)),
        {"hub_dialect": True})
    s["qwen3_tied"] = ("qwen3", dict(BASE, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), {})
    s["qwen3_untied_sharded"] = ("qwen3", dict(BASE, tie_word_embeddings=False, num_hidden_layers=3,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0)), {"shard": "60KB"})
    s["qwen3_bf16"] = ("qwen3", dict(BASE, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), {"dtype": "bf16"})
    return s


def reinit(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                if "embed_tokens" in name:
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.7)
                else:
                    fan_in = p.shape[-1]
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in))
            elif "norm" in name:
                p.copy_(1.0 + (torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.15)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.1)


def to_hub_dialect(cfg_path):
    """Rewrites a transformers-5 config.json into the dialect hub checkpoints ship:
    rope_theta at top level and rope_scaling with 'type'."""
    with open(cfg_path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    t = rp.pop("rope_type")
    if t != "default":
        rp["type"] = t
        c["rope_scaling"] = rp
    else:
        c["rope_scaling"] = None
    with open(cfg_path, "w") as f:
        json.dump(c, f, indent=2)


def make(name, spec, out_root):
    model_type, kw, opt = spec
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, name)))
    cfg = AutoConfig.for_model(model_type, **kw)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    reinit(model, gen)
    if opt.get("dtype") == "bf16":
        model = model.to(torch.bfloat16)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    kwargs = {}
    if "shard" in opt:
        kwargs["max_shard_size"] = opt["shard"]
    model.save_pretrained(out, **kwargs)
    if opt.get("hub_dialect"):
        to_hub_dialect(os.path.join(out, "config.json"))
    for junk in ("generation_config.json",):
        p = os.path.join(out, junk)
        if os.path.exists(p):
            os.remove(p)

    # Reference in float64 from exactly the saved weights.
    ref = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float64)
    ref.eval()
    V = kw["vocab_size"]
    g = torch.Generator().manual_seed(SEED + 7)
    tokens = torch.randint(3, V, (T_PROMPT,), generator=g)
    with torch.no_grad():
        logits = ref(tokens[None]).logits[0]  # [T, V] float64
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))

    prompt = tokens[:GREEDY_PROMPT]
    with torch.no_grad():
        res = ref.generate(prompt[None], max_new_tokens=GREEDY_NEW, do_sample=False,
                           output_scores=True, return_dict_in_generate=True,
                           eos_token_id=kw["eos_token_id"], pad_token_id=kw["pad_token_id"])
    seq = res.sequences[0].tolist()
    margins = []
    for sc in res.scores:
        top = torch.topk(sc[0].to(torch.float64), 2).values
        margins.append(float(top[0] - top[1]))
    meta = dict(name=name, model_type=model_type, dtype=opt.get("dtype", "f32"),
                tokens=tokens.tolist(), vocab_size=V,
                max_abs_ref=float(logits.abs().max()),
                greedy_prompt=prompt.tolist(), greedy_ids=seq[GREEDY_PROMPT:],
                greedy_max_new=GREEDY_NEW, greedy_min_margin=min(margins) if margins else None,
                transformers=transformers.__version__, torch=torch.__version__)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} files={sorted(os.listdir(out))}")


def main():
    out_root = sys.argv[1]
    names = sys.argv[2:]
    specs = fixture_specs()
    for n in names or specs:
        make(n, specs[n], out_root)


if __name__ == "__main__":
    main()
