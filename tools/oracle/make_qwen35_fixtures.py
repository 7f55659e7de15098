#!/usr/bin/env python3
"""Fixtures for the gated-DeltaNet hybrids (qwen3_5, qwen3_5_moe, qwen3_next), on the GPU box.

Same recipe as make_fixtures.py: tiny configs, real-spread re-initialisation, float64
reference on the CPU (transformers falls back to its torch DeltaNet kernels there; they
compute the recurrence in float32 whatever the model dtype), experts_implementation="eager".
Every model mixes linear_attention (GatedDeltaNet) and full_attention layers. What is
special here:
  * The (1+w) RMSNorms (input/post-attention, final, q/k norms) store zero-centred
    weights, so they are re-initialised around 0 +- 0.15; the DeltaNet output norm is a
    plain weight (1 +- 0.15). A_log and dt_bias get values that keep the per-token decay
    exp(g) in a useful range (neither ~1 everywhere nor ~0).
  * Linear heads are grouped (2 key heads, 4 value heads) with Dk != Dv, so a wrong
    head mapping or a transposed state shows.
  * qwen3_5 has a 300-token prompt: longer than one engine prefill ubatch (256) and many
    DeltaNet chunks (transformers' chunk is 64).
  * qwen3_5_moe_hub is the hub's VL wrapper: built as Qwen3_5MoeForConditionalGeneration
    with a tiny vision tower, saved with `model.language_model.` / `model.visual.` names,
    experts forced to the fused layout (experts.gate_up_proj / experts.down_proj), plus
    MTP tensors the engine must ignore.
  * qwen3_next_hub rewrites the config into the hub dialect (rope_theta and
    partial_rotary_factor at top level, full_attention_interval instead of layer_types)
    and the experts into per-expert tensors, and reloads it in transformers to check the
    rewrite means the same model.
For each fixture ref.json also records transformers' own one-token-at-a-time logits
against its full-prompt logits (step_vs_prefill), i.e. how far its recurrent and chunked
DeltaNet paths agree.

Usage: python3 make_qwen35_fixtures.py OUT_DIR [name ...]
With SRC_OUT set, the transformers modeling/config sources of these families are copied
there too (for reading the reference off the box).
"""
import json
import math
import os
import shutil
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

SEED = 1234
GREEDY_PROMPT = 8
GREEDY_NEW = 16

LINEAR = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=24, linear_conv_kernel_dim=4)
ATTN = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32)
COMMON = dict(vocab_size=300, hidden_size=64, max_position_embeddings=512, rms_norm_eps=1e-6,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, hidden_act="silu", **LINEAR, **ATTN)
ROPE35 = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
              mrope_section=[2, 1, 1], mrope_interleaved=True)
LIN, FULL = "linear_attention", "full_attention"

VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
              spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16)


def specs():
    s = {}
    # Dense Qwen3.5, text-only class (qwen3_5_text), long prompt.
    s["qwen3_5"] = dict(kind="qwen3_5_text", T=300, cfg=dict(
        COMMON, intermediate_size=96, num_hidden_layers=4, tie_word_embeddings=False,
        layer_types=[LIN, LIN, FULL, LIN], rope_parameters=dict(ROPE35)))
    # Dense Qwen3.5 as the hub ships small ones: VL wrapper, tied embeddings.
    s["qwen3_5_vl_tied"] = dict(kind="qwen3_5_vl", T=40, cfg=dict(
        COMMON, intermediate_size=96, num_hidden_layers=3, tie_word_embeddings=True,
        layer_types=[LIN, FULL, LIN], rope_parameters=dict(ROPE35)))
    # Qwen3.5-MoE hub VL wrapper, fused experts, shared expert, MTP tensors.
    s["qwen3_5_moe_hub"] = dict(kind="qwen3_5_moe_vl", T=80, cfg=dict(
        COMMON, num_hidden_layers=4, tie_word_embeddings=False, layer_types=[LIN, FULL, LIN, FULL],
        num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        rope_parameters=dict(ROPE35)))
    # Qwen3-Next: fused in_proj_qkvz / in_proj_ba, MoE except mlp_only_layers, renormalised top-k.
    s["qwen3_next"] = dict(kind="qwen3_next", T=140, cfg=dict(
        COMMON, intermediate_size=96, num_hidden_layers=4, tie_word_embeddings=False,
        layer_types=[LIN, LIN, LIN, FULL], num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=True,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25)))
    # Qwen3-Next in the hub dialect, sparse every 2nd layer, no renormalisation, per-expert tensors.
    s["qwen3_next_hub"] = dict(kind="qwen3_next", T=24, hub=True, cfg=dict(
        COMMON, intermediate_size=96, num_hidden_layers=4, tie_word_embeddings=False,
        layer_types=[LIN, FULL, LIN, FULL], num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, decoder_sparse_step=2, mlp_only_layers=[], norm_topk_prob=False,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0, partial_rotary_factor=0.25)))
    return s


def zero_centred_norm(name):
    """The Qwen3.5 / Qwen3-Next RMSNorms that compute x * (1 + w)."""
    if "visual" in name:
        return False
    return (name.endswith("layernorm.weight") or name.endswith("q_norm.weight") or name.endswith("k_norm.weight")
            or name.endswith("model.norm.weight") or name.endswith("language_model.norm.weight"))


def reinit(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(0.05 + torch.rand(p.shape, generator=gen, dtype=torch.float64) * 0.55))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5 - 0.5)
            elif p.ndim >= 2:
                if "embed_tokens" in name:
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.7)
                else:
                    fan_in = p.shape[-1]
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in))
            elif zero_centred_norm(name):
                p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.15)
            elif "norm" in name:
                p.copy_(1.0 + (torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.15)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.1)


def build(cls_name, cfg, moe):
    cls = getattr(transformers, cls_name)
    kw = dict(attn_implementation="eager", dtype=torch.float32)
    if moe:
        kw["experts_implementation"] = "eager"
    try:
        return cls._from_config(cfg, **kw)
    except (TypeError, ValueError) as e:
        print(f"  {cls_name}._from_config({sorted(kw)}) failed ({e}); retrying without experts_implementation")
        kw.pop("experts_implementation", None)
        return cls._from_config(cfg, **kw)


def text_config(cls_name, c):
    """The text config; if this transformers rejects the mrope keys, retry without them."""
    cls = getattr(transformers, cls_name)
    try:
        return cls(**c)
    except Exception as e:  # noqa: BLE001
        print(f"  {cls_name}: {e}; retrying without mrope keys")
        c = dict(c, rope_parameters={k: v for k, v in c["rope_parameters"].items() if not k.startswith("mrope")})
        return cls(**c)


def make_model(spec):
    """(model, model_type written to config.json, wrapped_by_hand)."""
    k, c = spec["kind"], dict(spec["cfg"])
    if k == "qwen3_5_text":
        return build("Qwen3_5ForCausalLM", text_config("Qwen3_5TextConfig", c), False), "qwen3_5_text", False
    if k == "qwen3_next":
        return build("Qwen3NextForCausalLM", transformers.Qwen3NextConfig(**c), True), "qwen3_next", False
    vl = {"qwen3_5_vl": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", "Qwen3_5TextConfig",
                         "Qwen3_5ForCausalLM", "qwen3_5", False),
          "qwen3_5_moe_vl": ("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeTextConfig",
                             "Qwen3_5MoeForCausalLM", "qwen3_5_moe", True)}[k]
    try:
        tc = text_config(vl[2], c)
        cfg = getattr(transformers, vl[0])(text_config=tc, vision_config=dict(VISION),
                                           tie_word_embeddings=c["tie_word_embeddings"])
        return build(vl[1], cfg, vl[5]), vl[4], False
    except Exception:  # noqa: BLE001 - fall back to the text model, wrapped by hand after saving
        traceback.print_exc()
        print(f"  {vl[1]} could not be built; using {vl[3]} and writing the wrapper layout by hand")
        return build(vl[3], text_config(vl[2], c), vl[5]), vl[4], True


def wrap_by_hand(out, model_type):
    """A text-only save rewritten as the hub's VL wrapper: model.language_model.* names, a
    stand-in vision tensor, config with text_config nested."""
    st = os.path.join(out, "model.safetensors")
    sd = load_file(st)
    sd = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in sd.items()}
    sd["model.visual.patch_embed.proj.weight"] = torch.zeros(VISION["hidden_size"], 3, 2, 4, 4)
    save_file(sd, st, metadata={"format": "pt"})
    with open(os.path.join(out, "config.json")) as f:
        tc = json.load(f)
    arch = "Qwen3_5MoeForConditionalGeneration" if model_type == "qwen3_5_moe" else "Qwen3_5ForConditionalGeneration"
    c = dict(architectures=[arch], model_type=model_type, text_config=tc,
             vision_config=dict(VISION, model_type=model_type + "_vision"),
             tie_word_embeddings=tc.get("tie_word_embeddings", False), image_token_id=248056,
             video_token_id=248057, vision_start_token_id=248053, vision_end_token_id=248054)
    tc.pop("architectures", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def fuse_experts(sd):
    """Per-expert experts.E.{gate,up,down}_proj.weight -> experts.gate_up_proj [E, 2I, H]
    (gate rows first) and experts.down_proj [E, H, I]. Fused input is left alone."""
    groups = {}
    out = {}
    for k, v in sd.items():
        if ".experts." in k and k.endswith("_proj.weight") and k.split(".experts.")[1].split(".")[0].isdigit():
            pre, rest = k.split(".experts.")
            e, proj, _ = rest.split(".")
            groups.setdefault(pre, {})[(int(e), proj)] = v
        else:
            out[k] = v
    for pre, g in groups.items():
        E = 1 + max(e for e, _ in g)
        out[pre + ".experts.gate_up_proj"] = torch.stack(
            [torch.cat([g[(e, "gate_proj")], g[(e, "up_proj")]], 0) for e in range(E)]).contiguous()
        out[pre + ".experts.down_proj"] = torch.stack([g[(e, "down_proj")] for e in range(E)]).contiguous()
    return out


def split_experts(sd):
    """Fused experts -> hub per-expert names. Per-expert input is left alone."""
    out = {}
    for k, v in sd.items():
        if k.endswith("experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            I2 = v.shape[1]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, : I2 // 2].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, I2 // 2:].contiguous()
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def next_hub_config(path, interval):
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp["rope_theta"]
    c["partial_rotary_factor"] = rp.get("partial_rotary_factor", 0.25)
    c["rope_scaling"] = None
    lt = c.pop("layer_types")
    want = [LIN if (i + 1) % interval else FULL for i in range(len(lt))]
    assert lt == want, (lt, want)
    c["full_attention_interval"] = interval
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids[None]).logits[0]


def step_logits(model, ids):
    """transformers' own decode path: one token at a time through its cache."""
    rows = []
    with torch.no_grad():
        out = model(input_ids=ids[None, :1], use_cache=True)
        rows.append(out.logits[0, -1])
        pkv = out.past_key_values
        for t in range(1, len(ids)):
            out = model(input_ids=ids[None, t:t + 1], past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            rows.append(out.logits[0, -1])
    return torch.stack(rows)


def make(name, spec, out_root):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, name)))
    model, model_type, by_hand = make_model(spec)
    model.eval()
    reinit(model, gen)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    for junk in ("generation_config.json",):
        p = os.path.join(out, junk)
        if os.path.exists(p):
            os.remove(p)
    st = os.path.join(out, "model.safetensors")
    if by_hand:
        wrap_by_hand(out, model_type)
    sd = load_file(st)
    names_saved = sorted(sd.keys())
    print(f"  saved {len(names_saved)} tensors; layer-0/1 names: "
          f"{[n for n in names_saved if 'layers.0.' in n or 'layers.1.' in n]}")
    kw = spec["cfg"]
    if spec["kind"] == "qwen3_5_moe_vl":
        sd = fuse_experts(sd)
        H = kw["hidden_size"]
        g = torch.Generator().manual_seed(5)
        sd["mtp.fc.weight"] = torch.randn(H, 2 * H, generator=g)
        sd["mtp.pre_fc_norm_embedding.weight"] = torch.zeros(H)
        sd["mtp.layers.0.input_layernorm.weight"] = torch.zeros(H)
        save_file(sd, st, metadata={"format": "pt"})
        with open(os.path.join(out, "config.json")) as f:
            c = json.load(f)
        c["text_config"]["mtp_num_hidden_layers"] = 1
        c["text_config"]["full_attention_interval"] = 2
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
    if spec.get("hub"):
        sd = split_experts(sd)
        save_file(sd, st, metadata={"format": "pt"})
        next_hub_config(os.path.join(out, "config.json"), 2)

    ref = model.to(torch.float64)
    ref.eval()
    T, V = spec["T"], kw["vocab_size"]
    g = torch.Generator().manual_seed(SEED + 7)
    tokens = torch.randint(3, V, (T,), generator=g)
    logits = logits_of(ref, tokens)
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))

    meta_extra = {}
    try:
        sl = step_logits(ref, tokens)
        meta_extra["transformers_step_vs_prefill"] = float((sl - logits).abs().max())
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        traceback.print_exc()
        meta_extra["transformers_step_vs_prefill"] = f"failed: {e}"
    if by_hand:
        meta_extra["wrapped_by_hand"] = True
    if spec.get("hub") or (spec["kind"] == "qwen3_5_moe_vl" and not by_hand):
        try:
            if spec["kind"] == "qwen3_5_moe_vl":
                re = transformers.Qwen3_5MoeForConditionalGeneration.from_pretrained(
                    out, dtype=torch.float64, attn_implementation="eager", experts_implementation="eager")
            else:
                re = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager",
                                                          experts_implementation="eager")
            re.eval()
            meta_extra["reload_check_max_diff"] = float((logits_of(re, tokens) - logits).abs().max())
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            meta_extra["reload_check_max_diff"] = f"failed: {e}"

    prompt = tokens[:GREEDY_PROMPT]
    with torch.no_grad():
        res = ref.generate(prompt[None], attention_mask=torch.ones(1, GREEDY_PROMPT, dtype=torch.long),
                           max_new_tokens=GREEDY_NEW, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, eos_token_id=kw["eos_token_id"],
                           pad_token_id=kw["pad_token_id"])
    seq = res.sequences[0].tolist()
    margins = [float(torch.topk(sc[0].to(torch.float64), 2).values.diff().abs()) for sc in res.scores]
    meta = dict(name=name, model_type=model_type, dtype="f32", tokens=tokens.tolist(), vocab_size=V,
                max_abs_ref=float(logits.abs().max()), greedy_prompt=prompt.tolist(),
                greedy_ids=seq[GREEDY_PROMPT:], greedy_max_new=GREEDY_NEW,
                greedy_min_margin=min(margins) if margins else None,
                transformers=transformers.__version__, torch=torch.__version__,
                transformers_saved_names=[n for n in names_saved if "layers.0." in n or "layers.1." in n
                                          or "layers." not in n][:60], **meta_extra)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} {meta_extra} files={sorted(os.listdir(out))}")


def copy_sources(dst):
    root = os.path.dirname(transformers.__file__)
    os.makedirs(dst, exist_ok=True)
    for rel in ("models/qwen3_5/modeling_qwen3_5.py", "models/qwen3_5/configuration_qwen3_5.py",
                "models/qwen3_5_moe/modeling_qwen3_5_moe.py", "models/qwen3_5_moe/configuration_qwen3_5_moe.py",
                "models/qwen3_next/modeling_qwen3_next.py", "models/qwen3_next/configuration_qwen3_next.py",
                "conversion_mapping.py", "configuration_utils.py"):
        p = os.path.join(root, rel)
        if os.path.exists(p):
            shutil.copy(p, os.path.join(dst, rel.replace("/", "__")))
        else:
            print(f"  source {rel} not found")


def main():
    out_root = sys.argv[1]
    if os.environ.get("SRC_OUT"):
        try:
            copy_sources(os.environ["SRC_OUT"])
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    s = specs()
    failed = []
    for n in sys.argv[2:] or s:
        print(f"== {n}", flush=True)
        try:
            make(n, s[n], out_root)
        except Exception:  # noqa: BLE001 - keep making the others
            traceback.print_exc()
            failed.append(n)
        sys.stdout.flush()
    print(f"failed: {failed}")


if __name__ == "__main__":
    main()
