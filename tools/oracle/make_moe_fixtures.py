#!/usr/bin/env python3
"""Fixtures for the MoE / MLA families (deepseek_v3, qwen3_moe), on the GPU box.

Same recipe as make_fixtures.py (whose helpers this imports): tiny configs, real-spread
re-initialisation, float64 reference with experts_implementation="eager". Extra variants:
  *_hub      : the checkpoint rewritten as hub checkpoints ship it: per-expert tensors
               (experts.E.{gate,up,down}_proj), hub config dialect, plus an MTP layer
               (index == num_hidden_layers) that the loader must skip.
  *_fp8      : linear weights quantized to F8_E4M3 with 128x128 block scales
               (weight_scale_inv, partial edge blocks); the reference is computed from the
               dequantized weights.
  *_long     : a 128-token prompt, for the decode-vs-prefill test.

Usage: python3 make_moe_fixtures.py OUT_DIR [name ...]
"""
import json
import math
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

DS_BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
               q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
               n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2, n_shared_experts=2,
               routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
               max_position_embeddings=1024, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
               pad_token_id=0, tie_word_embeddings=False, rope_interleave=True,
               rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=8.0,
                                    original_max_position_embeddings=128, beta_fast=32.0, beta_slow=1.0,
                                    mscale=1.0, mscale_all_dim=1.0))

QM_BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
               mlp_only_layers=[1], max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1,
               eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
               rope_parameters=dict(rope_type="default", rope_theta=1000000.0))


def specs():
    s = {}
    s["deepseek_v3"] = ("deepseek_v3", dict(DS_BASE), {})
    s["deepseek_v3_nolora"] = ("deepseek_v3", dict(DS_BASE, q_lora_rank=None, n_group=1, topk_group=1,
                                                   norm_topk_prob=False, n_shared_experts=1,
                                                   rope_parameters=dict(rope_type="default", rope_theta=10000.0)), {})
    s["deepseek_v3_hub"] = ("deepseek_v3", dict(DS_BASE), {"hub": True})
    s["deepseek_v3_fp8"] = ("deepseek_v3", dict(DS_BASE, hidden_size=160, intermediate_size=288,
                                                moe_intermediate_size=136, q_lora_rank=136, kv_lora_rank=144,
                                                num_hidden_layers=2),
                            {"hub": True, "fp8": True})
    s["deepseek_v3_long"] = ("deepseek_v3", dict(DS_BASE, num_hidden_layers=2), {"T": 128})
    s["qwen3_moe"] = ("qwen3_moe", dict(QM_BASE), {})
    s["qwen3_moe_norenorm"] = ("qwen3_moe", dict(QM_BASE, norm_topk_prob=False, mlp_only_layers=[],
                                                 decoder_sparse_step=2), {})
    return s


def to_hub_names(sd, n_experts_key):
    """Fused experts (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) ->
    per-expert hub names. Leaves already per-expert checkpoints alone."""
    out = {}
    for k, v in sd.items():
        if k.endswith("experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            E, twoI, _ = v.shape
            for e in range(E):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, : twoI // 2].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, twoI // 2:].contiguous()
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def quantize_fp8(w):
    """[out, in] float -> (E4M3 weight, f32 scale_inv [ceil(out/128), ceil(in/128)], dequant)."""
    o, i = w.shape
    bo, bi = (o + 127) // 128, (i + 127) // 128
    scale = torch.zeros(bo, bi, dtype=torch.float32)
    q = torch.zeros(o, i, dtype=torch.float8_e4m3fn)
    deq = torch.zeros(o, i, dtype=torch.float64)
    for a in range(bo):
        for b in range(bi):
            blk = w[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128].to(torch.float32)
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            qb = (blk / s).to(torch.float8_e4m3fn)
            scale[a, b] = s
            q[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128] = qb
            deq[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128] = qb.to(torch.float64) * s.to(torch.float64)
    return q, scale, deq


def hub_config(path, mtp):
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    t = rp.pop("rope_type")
    c["rope_scaling"] = dict(rp, type=t) if t != "default" else None
    c["topk_method"] = "noaux_tc"
    c["scoring_func"] = "sigmoid"
    c["moe_layer_freq"] = 1
    c["num_nextn_predict_layers"] = mtp
    c["architectures"] = ["DeepseekV3ForCausalLM"]
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def make(name, spec, out_root):
    model_type, kw, opt = spec
    torch.manual_seed(mf.SEED)
    gen = torch.Generator().manual_seed(mf.SEED + sum(map(ord, name)))
    cfg = AutoConfig.for_model(model_type, **kw)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32,
                                             experts_implementation="eager")
    model.eval()
    mf.reinit(model, gen)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    gc = os.path.join(out, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    names_saved = sorted(load_file(os.path.join(out, "model.safetensors")).keys())

    if opt.get("hub") or opt.get("fp8"):
        sd = load_file(os.path.join(out, "model.safetensors"))
        sd = to_hub_names(sd, "n_routed_experts")
        deq_sd = {}
        if opt.get("fp8"):
            q_sd = {}
            for k, v in sd.items():
                lin = (v.ndim == 2 and k.endswith(".weight") and "embed_tokens" not in k and "lm_head" not in k
                       and not k.endswith("mlp.gate.weight"))
                if lin:
                    q, s, deq = quantize_fp8(v)
                    q_sd[k] = q
                    q_sd[k[: -len("weight")] + "weight_scale_inv"] = s
                    deq_sd[k] = deq
                else:
                    q_sd[k] = v
            sd = q_sd
        L = kw["num_hidden_layers"]
        # An MTP layer past num_hidden_layers, as DeepSeek checkpoints ship: must be skipped.
        g = torch.Generator().manual_seed(5)
        sd[f"model.layers.{L}.eh_proj.weight"] = torch.randn(kw["hidden_size"], 2 * kw["hidden_size"], generator=g)
        sd[f"model.layers.{L}.enorm.weight"] = torch.ones(kw["hidden_size"])
        save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        hub_config(os.path.join(out, "config.json"), 1)
        if opt.get("fp8"):
            with open(os.path.join(out, "config.json")) as f:
                c = json.load(f)
            c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                        "weight_block_size": [128, 128]}
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(c, f, indent=2)

    # The reference: from the float32 model, with fp8 weights replaced by their dequantized values.
    ref = model.to(torch.float64)
    if opt.get("fp8"):
        # map hub per-expert names back onto the model's parameters
        params = dict(ref.named_parameters())
        with torch.no_grad():
            for k, deq in deq_sd.items():
                if k in params:
                    params[k].copy_(deq)
                    continue
                # experts.E.{gate,up,down}_proj.weight -> fused parameter slices
                pre, rest = k.split(".experts.")
                e, proj, _ = rest.split(".")
                e = int(e)
                fused_gu, fused_d = params.get(pre + ".experts.gate_up_proj"), params.get(pre + ".experts.down_proj")
                if fused_gu is None:
                    raise KeyError(k)
                I = fused_gu.shape[1] // 2
                if proj == "gate_proj":
                    fused_gu[e, :I].copy_(deq)
                elif proj == "up_proj":
                    fused_gu[e, I:].copy_(deq)
                else:
                    fused_d[e].copy_(deq)
    ref.eval()
    T = opt.get("T", mf.T_PROMPT)
    V = kw["vocab_size"]
    g = torch.Generator().manual_seed(mf.SEED + 7)
    tokens = torch.randint(3, V, (T,), generator=g)
    with torch.no_grad():
        logits = ref(tokens[None]).logits[0]
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))
    prompt = tokens[: mf.GREEDY_PROMPT]
    with torch.no_grad():
        res = ref.generate(prompt[None], max_new_tokens=mf.GREEDY_NEW, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, eos_token_id=kw["eos_token_id"],
                           pad_token_id=kw["pad_token_id"])
    seq = res.sequences[0].tolist()
    margins = [float(torch.topk(sc[0].to(torch.float64), 2).values.diff().abs()) for sc in res.scores]
    meta = dict(name=name, model_type=model_type, dtype="fp8" if opt.get("fp8") else "f32", tokens=tokens.tolist(),
                vocab_size=V, max_abs_ref=float(logits.abs().max()), greedy_prompt=prompt.tolist(),
                greedy_ids=seq[mf.GREEDY_PROMPT:], greedy_max_new=mf.GREEDY_NEW,
                greedy_min_margin=min(margins) if margins else None, transformers_saved_names=names_saved[:12])
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} saved={[n for n in names_saved if 'layers.1.' in n]}")


def main():
    out_root = sys.argv[1]
    s = specs()
    for n in sys.argv[2:] or s:
        make(n, s[n], out_root)


if __name__ == "__main__":
    main()
