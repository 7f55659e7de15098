#!/usr/bin/env python3
"""An mlx-community style DeepSeek V4 fixture (run on the GPU box; transformers computes the
reference): mlx_deepseek_v4_4bit.

A tiny V4 (make_dsv4_fixtures.py's recipe: every layer type with the real 4 / 128 rates, hash
and top-k MoE, hc_mult 4) quantized with MLX's algorithms (make_mlx_fixtures.quantize / pack)
and written under mlx-lm's post-sanitize names (its deepseek_v4.py sanitize: model.layers.N.
attn.* with the original leaf names, attn_hc / ffn_hc, ffn.gate.e_score_correction_bias,
shared_experts.{gate,up,down}_proj, routed experts stacked as ffn.switch_mlp.{gate,up,down}_proj,
model.hc_head.{fn,base,scale}, model.embed_tokens, lm_head) with the hub config dialect plus
`quantization` / `quantization_config`:
  default affine 4-bit, group 32 (every Linear and the embedding);
  routed expert stacks mxfp4 (group 32, E8M0 scales); routers affine 8-bit.
mHC mappings, sinks, compressor position biases, norms and hash tables stay f32 / int.
The float64 reference runs the transformers model whose parameters are the dequantized values.

Usage: python3 make_mlx_dsv4_fixtures.py OUT_DIR
"""
import json
import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_dsv4_fixtures as v4  # noqa: E402
import make_fixtures as mf  # noqa: E402
import make_mlx_fixtures as mx  # noqa: E402

NAME = "mlx_deepseek_v4_4bit"
KW = dict(v4.V4_BASE, num_hidden_layers=3, q_lora_rank=64, layer_types=[v4.CSA, v4.HCA, v4.SW],
          compress_rates={v4.CSA: 4, v4.HCA: 128}, mlp_layer_types=["hash_moe", "moe", "moe"], sliding_window=16)
OPT = dict(T=150, gp=12, gn=12, hub=True)
DEFAULT = dict(group_size=32, bits=4, mode="affine")
EXPERTS = dict(group_size=32, bits=4, mode="mxfp4")
ROUTER = dict(group_size=32, bits=8, mode="affine")


def mlx_name(o):
    """original checkpoint name -> mlx-lm's post-sanitize name"""
    top = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
           "head.weight": "lm_head.weight", "hc_head_fn": "model.hc_head.fn", "hc_head_base": "model.hc_head.base",
           "hc_head_scale": "model.hc_head.scale"}
    if o in top:
        return top[o]
    n = "model." + o
    n = n.replace(".ffn.gate.bias", ".ffn.gate.e_score_correction_bias")
    for sub in ("attn", "ffn"):
        for p in ("fn", "base", "scale"):
            if n.endswith(f".hc_{sub}_{p}"):
                n = n[: -len(f".hc_{sub}_{p}")] + f".{sub}_hc.{p}"
    for a, b in (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")):
        n = n.replace(f".shared_experts.{a}.", f".shared_experts.{b}.")
    return n


def main():
    out_root = sys.argv[1]
    out = os.path.join(out_root, "fixtures", NAME)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    cfg, model = v4.build(KW, OPT, mf.SEED, NAME, out)
    model = model.to(torch.float64)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    tensors, block = {}, dict(DEFAULT)

    def put(name, t):
        dt = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32"}[t.dtype]
        tensors[name] = (dt, list(t.shape), t.contiguous().numpy().tobytes())

    def module(path, w, p):
        """quantize one module [..., R, C]; returns the dequantized float64 values"""
        codes, s, b, dq = mx.quantize(w, p, torch.float32)
        tensors[path + ".weight"] = ("U32", list(w.shape[:-1]) + [w.shape[-1] * p["bits"] // 32],
                                     mx.pack(codes, p["bits"]).contiguous().numpy().tobytes())
        if s.dtype == torch.uint8:   # mxfp: E8M0 exponents, U8
            tensors[path + ".scales"] = ("U8", list(s.shape), s.contiguous().numpy().tobytes())
        else:
            put(path + ".scales", s)
        if b is not None:
            put(path + ".biases", b)
        if p is not DEFAULT:
            block[path] = {k: v for k, v in p.items() if k != "mode" or v != "affine"}
        return dq

    for k in sorted(sd):
        v = sd[k].to(torch.float32).to(torch.float64) if sd[k].is_floating_point() else sd[k]
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = "model." + k[len("model."): -len("mlp.experts.gate_up_proj")] + "ffn.switch_mlp."
            I = v.shape[1] // 2
            sd[k][:, :I] = module(pre + "gate_proj", v[:, :I].contiguous(), EXPERTS)
            sd[k][:, I:] = module(pre + "up_proj", v[:, I:].contiguous(), EXPERTS)
            continue
        if k.endswith("mlp.experts.down_proj"):
            pre = "model." + k[len("model."): -len("mlp.experts.down_proj")] + "ffn.switch_mlp."
            sd[k] = module(pre + "down_proj", v, EXPERTS)
            continue
        (o,) = v4.to_original({k: v}).keys()
        m = mlx_name(o)
        if v.is_floating_point() and v.ndim == 2 and m.endswith(".weight") and "norm" not in m:
            sd[k] = module(m[: -len(".weight")], v, ROUTER if m.endswith(".ffn.gate.weight") else DEFAULT)
        elif v.is_floating_point():
            put(m, v.to(torch.float32))
            sd[k] = v
        else:
            put(m, v.to(torch.int32))
    model.load_state_dict(sd)
    mx.write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "mlx"})
    cp = os.path.join(out, "config.json")
    with open(cp) as f:
        c = json.load(f)
    c["quantization"] = block
    c["quantization_config"] = block
    with open(cp, "w") as f:
        json.dump(c, f, indent=2)

    model.eval()
    g = torch.Generator().manual_seed(mf.SEED + 7)
    tokens = torch.randint(3, KW["vocab_size"], (OPT["T"],), generator=g)
    a = v4.run_ref(model, tokens, OPT, KW)
    logits = a["logits"]
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))
    gp = OPT["gp"]
    meta = dict(name=NAME, model_type="deepseek_v4", dtype="mlx affine 4-bit g32 + mxfp4 experts + 8-bit routers",
                tokens=tokens.tolist(), vocab_size=KW["vocab_size"], max_abs_ref=float(logits.abs().max()),
                greedy_prompt=tokens[:gp].tolist(), greedy_ids=a["seq"][gp:], greedy_max_new=OPT["gn"],
                greedy_min_margin=min(a["margins"]) if a["margins"] else None, greedy_with_cache=a["greedy_cache"],
                ref_decode_vs_prefill=a["decode_vs_prefill"], indexer_gap_prefill=v4.m32.finite(a["pre"]),
                indexer_gap_decode=v4.m32.finite(a["dec"]), transformers=transformers.__version__,
                torch=torch.__version__)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{NAME}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} margin={meta['greedy_min_margin']} "
          f"gaps {a['pre']} {a['dec']} decode_vs_prefill={a['decode_vs_prefill']:.3g} files={sorted(os.listdir(out))} "
          f"in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
