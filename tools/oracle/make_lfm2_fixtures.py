#!/usr/bin/env python3
"""Fixtures for the LFM2 families (lfm2, lfm2_moe), on the GPU box (CPU torch is enough).

Same recipe as make_fixtures.py (whose helpers this imports): tiny configs, real-spread
re-initialisation (plus the MoE expert_bias buffers, which are not parameters), save with
save_pretrained, then the float64 reference from the checkpoint reloaded from disk, so that
transformers' own reading of the saved config is what the reference uses.
  lfm2           : conv + attention layers, ff auto-adjust with rounding, tied head, and a
                   300-token prompt (longer than the engine's 256-token prefill chunk).
  lfm2_hub       : the hub config dialect (block_ff_dim, full_attn_idxs, tie_embedding,
                   theta), conv_bias and a 4-tap kernel, one kv head. transformers 5.17
                   does not read "theta" (4.x did): the config says 300000 and the reference
                   runs at the default 1e6, as transformers reads it.
  lfm2_moe       : dense + MoE layers (sigmoid router with expert_bias, top-k renormalised,
                   routed_scaling_factor), untied head. transformers 5.17 saves the experts
                   per expert as the hub ships them (feed_forward.experts.E.{w1,w3,w2}).
  lfm2_moe_hub   : hub config keys rope_theta / tie_embedding (and per-expert names, which
                   per_expert_names enforces should a transformers version save fused ones).
  lfm2_moe_nobias: use_expert_bias false, norm_topk_prob false.
  lfm2_moe_fused : the experts rewritten fused (experts.gate_up_proj [E, 2I, H],
                   experts.down_proj [E, H, I]), transformers' in-memory layout.
(block_ffn_dim_multiplier null, which the 4.x code read as "no multiplier, no rounding",
is refused by transformers 5.17's config validation, so no fixture has it.)
Besides the fixtures, OUT/debug/ gets each reference's hidden states and OUT/ref_src/ the
transformers files the reference ran (for reading, not for committing).

Usage: python3 make_lfm2_fixtures.py OUT_DIR [name ...]
"""
import json
import os
import shutil
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

COMMON = dict(vocab_size=300, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=1024, norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0)

LFM2 = dict(COMMON, intermediate_size=130, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0,
            block_multiple_of=16, num_hidden_layers=5,
            layer_types=["conv", "full_attention", "conv", "full_attention", "conv"],
            conv_L_cache=3, conv_bias=False, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0))

LFM2_HUB = dict(COMMON, num_key_value_heads=1, intermediate_size=160, block_auto_adjust_ff_dim=True,
                block_ffn_dim_multiplier=1.0, block_multiple_of=32, num_hidden_layers=3,
                layer_types=["conv", "full_attention", "conv"], conv_L_cache=4, conv_bias=True,
                tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0))

MOE = dict(COMMON, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=5,
           layer_types=["conv", "full_attention", "conv", "full_attention", "conv"], num_dense_layers=2,
           num_experts=8, num_experts_per_tok=3, routed_scaling_factor=1.7, norm_topk_prob=True,
           use_expert_bias=True, conv_L_cache=3, conv_bias=False, tie_word_embeddings=False,
           rope_parameters=dict(rope_type="default", rope_theta=1000000.0))

MOE_HUB = dict(COMMON, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=3,
               layer_types=["conv", "full_attention", "conv"], num_dense_layers=1, num_experts=4,
               num_experts_per_tok=2, routed_scaling_factor=1.0, norm_topk_prob=True, use_expert_bias=True,
               conv_L_cache=3, conv_bias=False, tie_word_embeddings=True,
               rope_parameters=dict(rope_type="default", rope_theta=500000.0))

MOE_NOBIAS = dict(MOE_HUB, num_experts=6, num_experts_per_tok=2, routed_scaling_factor=2.5, norm_topk_prob=False,
                  use_expert_bias=False, tie_word_embeddings=False)

MOE_FUSED = dict(MOE_HUB, num_experts=5, num_experts_per_tok=2, routed_scaling_factor=1.3,
                 layer_types=["full_attention", "conv", "conv"], tie_word_embeddings=False)


def specs():
    return {
        "lfm2": ("lfm2", LFM2, {"T": 300}),
        "lfm2_hub": ("lfm2", LFM2_HUB, {"hub": "lfm2", "theta": 300000.0, "T": 24, "hf_steps": True}),
        "lfm2_moe": ("lfm2_moe", MOE, {"T": 64}),
        "lfm2_moe_hub": ("lfm2_moe", MOE_HUB, {"hub": "lfm2_moe", "T": 24}),
        "lfm2_moe_nobias": ("lfm2_moe", MOE_NOBIAS, {"T": 24}),
        "lfm2_moe_fused": ("lfm2_moe", MOE_FUSED, {"fused": True, "T": 24}),
    }


def hub_config_lfm2(path, theta):
    """transformers-5 config.json -> the keys LiquidAI's first LFM2 checkpoints shipped."""
    with open(path) as f:
        c = json.load(f)
    c["block_ff_dim"] = c.pop("intermediate_size")
    lt = c.pop("layer_types")
    c["full_attn_idxs"] = [i for i, t in enumerate(lt) if t == "full_attention"]
    c["tie_embedding"] = c.pop("tie_word_embeddings", True)
    c.pop("rope_parameters")
    c["theta"] = theta
    # keys real hub configs carry that transformers does not read
    c.update(block_dim=c["hidden_size"], block_norm_eps=c["norm_eps"], num_heads=c["num_attention_heads"],
             conv_dim=c["hidden_size"], conv_dim_out=c["hidden_size"], block_use_swiglu=True,
             block_mlp_init_scale=1.0, block_out_init_scale=1.0, use_pos_enc=True,
             architectures=["Lfm2ForCausalLM"])
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def hub_config_lfm2_moe(path):
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp["rope_theta"]
    c["tie_embedding"] = c.pop("tie_word_embeddings", True)
    c["architectures"] = ["Lfm2MoeForCausalLM"]
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def per_expert_names(sd):
    """experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I] -> experts.E.{w1,w3,w2}.weight."""
    out = {}
    for k, v in sd.items():
        if k.endswith("experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            E, twoI, _ = v.shape
            for e in range(E):
                out[f"{pre}{e}.w1.weight"] = v[e, : twoI // 2].contiguous()
                out[f"{pre}{e}.w3.weight"] = v[e, twoI // 2:].contiguous()
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.w2.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def resolved(cfg):
    keys = ["layer_types", "intermediate_size", "moe_intermediate_size", "block_auto_adjust_ff_dim",
            "block_ffn_dim_multiplier", "block_multiple_of", "tie_word_embeddings", "rope_parameters",
            "rope_theta", "norm_eps", "conv_L_cache", "conv_bias", "num_dense_layers", "use_expert_bias",
            "norm_topk_prob", "routed_scaling_factor", "head_dim", "num_key_value_heads"]
    return {k: getattr(cfg, k, "<absent>") for k in keys}


def make(name, spec, out_root):
    model_type, kw, opt = spec
    moe = model_type == "lfm2_moe"
    extra = dict(experts_implementation="eager") if moe else {}
    torch.manual_seed(mf.SEED)
    gen = torch.Generator().manual_seed(mf.SEED + sum(map(ord, name)))
    cfg = AutoConfig.for_model(model_type, **kw)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32, **extra)
    model.eval()
    mf.reinit(model, gen)
    with torch.no_grad():
        for bn, b in model.named_buffers():
            if bn.endswith("expert_bias") and b is not None:
                b.copy_(torch.randn(b.shape, generator=gen, dtype=torch.float64) * 0.3)
    out = os.path.join(out_root, "fixtures", name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    gc = os.path.join(out, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    names_saved = sorted(load_file(os.path.join(out, "model.safetensors")).keys())
    shapes_saved = {k: list(v.shape) for k, v in load_file(os.path.join(out, "model.safetensors")).items()
                    if ".layers.0." in k or ".layers.1." in k or "layers" not in k}
    if opt.get("hub") == "lfm2":
        hub_config_lfm2(os.path.join(out, "config.json"), opt["theta"])
    elif opt.get("hub") == "lfm2_moe":
        sd = per_expert_names(load_file(os.path.join(out, "model.safetensors")))
        save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        hub_config_lfm2_moe(os.path.join(out, "config.json"))
    elif opt.get("fused"):
        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if kw["tie_word_embeddings"]:
            sd.pop("lm_head.weight", None)
        save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})

    # Reference: the checkpoint as transformers reads it back, in float64. If the reload
    # does not reproduce the weights, fall back to the in-memory model and say so.
    reload_note = "ok"
    sd0 = {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}
    try:
        ref = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float64, **extra)
        sd1 = ref.state_dict()
        worst, missing = 0.0, []
        for k, v in sd0.items():
            if k not in sd1:
                if not k.startswith("lm_head."):  # a tied head may be reported under one name only
                    missing.append(k)
                continue
            worst = max(worst, float((sd1[k].to(torch.float64) - v).abs().max()))
        if missing or worst > 0:
            reload_note = f"reload mismatch: worst {worst:g}, missing {missing[:6]}"
    except Exception as e:  # noqa: BLE001
        reload_note = f"reload failed: {type(e).__name__}: {e}"
        traceback.print_exc()
    if reload_note != "ok":
        print(f"{name}: {reload_note}; reference from the in-memory model")
        ref = model.to(torch.float64)
    ref.eval()

    T = opt.get("T", mf.T_PROMPT)
    V = kw["vocab_size"]
    g = torch.Generator().manual_seed(mf.SEED + 7)
    tokens = torch.randint(3, V, (T,), generator=g)
    with torch.no_grad():
        o = ref(tokens[None], output_hidden_states=True)
    logits = o.logits[0]
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))
    dbg = os.path.join(out_root, "debug")
    os.makedirs(dbg, exist_ok=True)
    hs = torch.stack([h[0] for h in o.hidden_states])  # [n, T, H]
    hs.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(dbg, f"{name}_hidden.f32"))

    # transformers' own cached decode, token by token, against its prefill (documents the
    # conv-cache behaviour of the reference; the engine is held to the prefill logits).
    hf_steps = None
    if opt.get("hf_steps"):
        try:
            pkv, rows = None, []
            with torch.no_grad():
                for t in range(T):
                    so = ref(tokens[None, t:t + 1], past_key_values=pkv, use_cache=True)
                    pkv = so.past_key_values
                    rows.append(so.logits[0, -1])
            hf_steps = float((torch.stack(rows) - logits).abs().max())
        except Exception as e:  # noqa: BLE001
            hf_steps = f"{type(e).__name__}: {e}"

    prompt = tokens[: mf.GREEDY_PROMPT]
    with torch.no_grad():
        res = ref.generate(prompt[None], max_new_tokens=mf.GREEDY_NEW, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, eos_token_id=kw["eos_token_id"],
                           pad_token_id=kw["pad_token_id"])
    seq = res.sequences[0].tolist()
    margins = [float(torch.topk(sc[0].to(torch.float64), 2).values.diff().abs()) for sc in res.scores]
    meta = dict(name=name, model_type=model_type, dtype="f32", tokens=tokens.tolist(), vocab_size=V,
                max_abs_ref=float(logits.abs().max()), greedy_prompt=prompt.tolist(),
                greedy_ids=seq[mf.GREEDY_PROMPT:], greedy_max_new=mf.GREEDY_NEW,
                greedy_min_margin=min(margins) if margins else None, reload=reload_note,
                hf_step_vs_prefill=hf_steps, resolved_config=resolved(ref.config),
                hidden_states_shape=list(hs.shape), transformers_saved_names=names_saved,
                saved_shapes=shapes_saved, transformers=transformers.__version__, torch=torch.__version__)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} reload={reload_note} hf_steps={hf_steps} "
          f"bytes={size} resolved={meta['resolved_config']}")


def copy_sources(out_root):
    base = os.path.dirname(transformers.__file__)
    dst = os.path.join(out_root, "ref_src")
    os.makedirs(dst, exist_ok=True)
    for rel in ["models/lfm2/modeling_lfm2.py", "models/lfm2/configuration_lfm2.py",
                "models/lfm2_moe/modeling_lfm2_moe.py", "models/lfm2_moe/configuration_lfm2_moe.py",
                "conversion_mapping.py", "modeling_rope_utils.py", "configuration_utils.py",
                "integrations/moe.py"]:
        p = os.path.join(base, rel)
        if os.path.exists(p):
            shutil.copy(p, os.path.join(dst, rel.replace("/", "__")))
        else:
            print(f"ref_src: {rel} not found")


def main():
    out_root = sys.argv[1]
    os.makedirs(out_root, exist_ok=True)
    print(f"transformers {transformers.__version__} torch {torch.__version__}")
    copy_sources(out_root)
    s = specs()
    failed = []
    for n in sys.argv[2:] or s:
        try:
            make(n, s[n], out_root)
        except Exception:  # noqa: BLE001 -- keep making the others
            traceback.print_exc()
            failed.append(n)
    print("failed:", failed)


if __name__ == "__main__":
    main()
