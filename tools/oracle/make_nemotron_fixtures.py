#!/usr/bin/env python3
"""Fixtures for the Nemotron-H family (nemotron_h), on the GPU box.

Same recipe as make_fixtures.py: tiny configs, real-spread re-initialisation, float64
reference on the CPU (transformers runs its torch path for the Mamba2 mixer there: chunked
SSD for prefill, the recurrence for decode), experts_implementation="eager".

Beyond the generic re-init, the Mamba2 parameters get values that make every formula
visible: A_log spread so that some heads forget within a few tokens and others keep their
state across the whole prompt (chunk-boundary bugs show), dt_bias spread so that some
softplus values fall under time_step_min (the clamp is exercised), D away from 1, and the
router's e_score_correction_bias (a buffer, which the generic re-init does not touch)
random so that a missing bias changes the chosen experts.

Fixtures:
  nemotron_h         every layer kind (M * - E), a 300-token prompt (two engine
                     micro-batches, several SSD chunks), transformers' in-memory tensor
                     names (model. prefix, stacked experts) as model.state_dict() has them;
                     time_step_min 0.05 so that the dt clamp matters, hence greedy ids from
                     generate(use_cache=False) (see make()).
  nemotron_h_hub     the hub dialect: hybrid_override_pattern, time_step_limit with a bare
                     Infinity, rms_norm_eps + layer_norm_epsilon, attention_head_dim,
                     `backbone.` names; dense (M - *) like Nemotron-Nano-9B-v2.
  nemotron_h_latent  MoE with fc1/fc2 latent projections, grouped top-k routing
                     (n_group 4, topk_group 2), norm_topk_prob, routed_scaling_factor,
                     per-expert hub names, no conv bias, kernel 3, one SSM group.

Debug output (not fixtures) goes to OUT_DIR/../dbg: per-layer hidden states of each
reference forward, the greedy scores, the raw config.json save_pretrained wrote and the
names it saved.

Usage: python3 make_nemotron_fixtures.py OUT_DIR [name ...]
"""
import json
import math
import os
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

SEED = 1234
GREEDY_PROMPT = 8
GREEDY_NEW = 16

BASE = dict(vocab_size=300, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=96, mlp_hidden_act="relu2", mamba_num_heads=8, mamba_head_dim=16, n_groups=2,
            ssm_state_size=16, conv_kernel=4, chunk_size=64, use_conv_bias=True, mamba_hidden_act="silu",
            time_step_min=0.05, time_step_max=0.1, time_step_limit=(0.0, float("inf")),
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=48, n_shared_experts=1, n_group=1, topk_group=1,
            norm_topk_prob=False, routed_scaling_factor=1.5, layer_norm_epsilon=1e-5,
            max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            tie_word_embeddings=False, use_mamba_kernels=False, use_bias=False, mlp_bias=False)


def specs():
    s = {}
    s["nemotron_h"] = (dict(BASE), "M-M*EM", {"T": 300, "layout": "memory", "greedy_no_cache": True})
    s["nemotron_h_hub"] = (dict(BASE, mamba_num_heads=6, mamba_head_dim=8, n_groups=3, ssm_state_size=8,
                                chunk_size=16, time_step_min=0.001, intermediate_size=80),
                           "M-M*-M-", {"T": 40, "layout": "hub", "hub_config": True})
    s["nemotron_h_latent"] = (dict(BASE, mamba_num_heads=4, mamba_head_dim=16, n_groups=1, ssm_state_size=32,
                                   conv_kernel=3, use_conv_bias=False, chunk_size=16, time_step_min=0.001,
                                   n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
                                   norm_topk_prob=True, routed_scaling_factor=2.5, moe_intermediate_size=24,
                                   moe_shared_expert_intermediate_size=40, moe_latent_size=32),
                              "MEM*E", {"T": 64, "layout": "hub"})
    return s


def reinit(model, gen):
    """make_fixtures.reinit, plus the Mamba2 / router specifics described above."""
    def rn(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    def ru(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "A_log":
                p.copy_(torch.log(ru(p.shape, 0.02, 2.0)))          # A in [-2, -0.02]
            elif leaf == "dt_bias":
                p.copy_(ru(p.shape, -3.0, 0.5))
            elif leaf == "D":
                p.copy_(ru(p.shape, -1.0, 1.5))
            elif p.ndim >= 2:
                if "embed" in name:
                    p.copy_(rn(p.shape) * 0.7)
                else:
                    p.copy_(rn(p.shape) / math.sqrt(p.shape[-1]))
            elif "norm" in name:
                p.copy_(1.0 + (torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.15)
            else:
                p.copy_(rn(p.shape) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(ru(b.shape, -0.2, 0.2))


def hub_names(sd):
    """transformers in-memory names -> hub checkpoint names: backbone. prefix, one tensor per
    expert (experts.E.up_proj.weight [I, in], experts.E.down_proj.weight [in, I])."""
    out = {}
    for k, v in sd.items():
        if k.startswith("model."):
            k = "backbone." + k[len("model."):]
        if k.endswith("experts.up_proj") or k.endswith("experts.down_proj"):
            pre, proj = k.rsplit(".", 1)
            for e in range(v.shape[0]):
                out[f"{pre}.{e}.{proj}.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def hub_config(path, pattern):
    """A config.json as hub checkpoints ship it (NVIDIA-Nemotron-Nano-9B-v2 style)."""
    with open(path) as f:
        c = json.load(f)
    for k in ("layers_block_type", "layer_types", "_num_hidden_layers", "mtp_layers_block_type"):
        c.pop(k, None)
    c["hybrid_override_pattern"] = pattern
    c["num_hidden_layers"] = len(pattern)
    c["time_step_limit"] = [0.0, float("inf")]     # json writes the bare Infinity literal
    c["rms_norm_eps"] = c.get("layer_norm_epsilon", 1e-5)
    c["attention_head_dim"] = c.get("head_dim", 16)
    c["mamba_proj_bias"] = False
    c["time_step_rank"] = 256
    c["architectures"] = ["NemotronHForCausalLM"]
    c["use_mamba_kernels"] = True
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def make(name, spec, out_root, dbg_root):
    kw, pattern, opt = spec
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, name)))
    cfg = AutoConfig.for_model("nemotron_h", hybrid_override_pattern=pattern, num_hidden_layers=len(pattern), **kw)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32,
                                             experts_implementation="eager")
    model.eval()
    pnames = [n for n, _ in model.named_parameters()]
    if kw.get("moe_latent_size") and not any("fc1_latent_proj" in n for n in pnames):
        raise RuntimeError(f"{name}: this transformers has no MoE latent projections")
    if len(model.config.layers_block_type) != len(pattern):
        raise RuntimeError(f"{name}: layers_block_type {model.config.layers_block_type} vs pattern {pattern}")
    reinit(model, gen)
    out = os.path.join(out_root, name)
    dbg = os.path.join(dbg_root, name)
    os.makedirs(out, exist_ok=True)
    os.makedirs(dbg, exist_ok=True)
    model.save_pretrained(out)
    for junk in ("generation_config.json",):
        p = os.path.join(out, junk)
        if os.path.exists(p):
            os.remove(p)
    saved = load_file(os.path.join(out, "model.safetensors"))
    names_saved = sorted(saved.keys())
    with open(os.path.join(dbg, "saved_names.json"), "w") as f:
        json.dump({k: list(saved[k].shape) for k in names_saved}, f, indent=1)
    with open(os.path.join(out, "config.json")) as f:
        raw_cfg = f.read()
    with open(os.path.join(dbg, "config_as_saved.json"), "w") as f:
        f.write(raw_cfg)

    # The checkpoint, in the layout this fixture covers (independent of what save_pretrained
    # chose to write): the in-memory state dict, or its hub renaming.
    sd = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    if opt["layout"] == "hub":
        sd = hub_names(sd)
    os.remove(os.path.join(out, "model.safetensors"))
    for f_ in os.listdir(out):
        if f_.startswith("model.safetensors"):
            os.remove(os.path.join(out, f_))
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})

    patched = False
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    if "num_hidden_layers" not in c:
        c["num_hidden_layers"] = len(pattern)
        patched = True
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
    if opt.get("hub_config"):
        hub_config(os.path.join(out, "config.json"), pattern)

    ref = model.to(torch.float64)
    ref.eval()
    T = opt["T"]
    V = kw["vocab_size"]
    g = torch.Generator().manual_seed(SEED + 7)
    tokens = torch.randint(3, V, (T,), generator=g)
    with torch.no_grad():
        res = ref(tokens[None], output_hidden_states=True)
    logits = res.logits[0]
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))
    hs = res.hidden_states
    if hs is not None:
        torch.stack([h[0] for h in hs]).to(torch.float32).numpy().astype("<f4").tofile(
            os.path.join(dbg, "hidden_states.f32"))
    prompt = tokens[:GREEDY_PROMPT]
    # transformers 5.17 clamps dt at time_step_min in its chunked (prefill) scan but not in its
    # single-token (decode) update, so with a cache its greedy run mixes the two rules. Where
    # this fixture makes the clamp matter (time_step_min 0.05), the greedy ids come from
    # generate(use_cache=False): every step is a full forward under the prefill rule, the
    # same rule as the logits reference. The cached run's ids are kept for the record.
    greedy_cached = None
    with torch.no_grad():
        gres = ref.generate(prompt[None], max_new_tokens=GREEDY_NEW, do_sample=False, output_scores=True,
                            return_dict_in_generate=True, eos_token_id=kw["eos_token_id"],
                            pad_token_id=kw["pad_token_id"])
        if opt.get("greedy_no_cache"):
            greedy_cached = gres.sequences[0].tolist()[GREEDY_PROMPT:]
            try:
                gres = ref.generate(prompt[None], max_new_tokens=GREEDY_NEW, do_sample=False, output_scores=True,
                                    return_dict_in_generate=True, eos_token_id=kw["eos_token_id"],
                                    pad_token_id=kw["pad_token_id"], use_cache=False)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                opt = dict(opt, greedy_no_cache=False)
    seq = gres.sequences[0].tolist()
    margins = [float(torch.topk(sc[0].to(torch.float64), 2).values.diff().abs()) for sc in gres.scores]
    torch.stack([sc[0] for sc in gres.scores]).to(torch.float32).numpy().astype("<f4").tofile(
        os.path.join(dbg, "greedy_scores.f32"))
    # Does transformers itself read this checkpoint back (names, config dialect)? Recorded, not required.
    reload_maxdiff = None
    try:
        back = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager", use_mamba_kernels=False,
                                                    experts_implementation="eager")
        back.eval()
        with torch.no_grad():
            reload_maxdiff = float((back(tokens[None]).logits[0] - logits).abs().max())
    except Exception as e:  # noqa: BLE001
        reload_maxdiff = f"error: {e}"[:300]
    meta = dict(name=name, reload_maxdiff=reload_maxdiff, model_type="nemotron_h", dtype="f32", pattern=pattern, tokens=tokens.tolist(),
                vocab_size=V, max_abs_ref=float(logits.abs().max()), greedy_prompt=prompt.tolist(),
                greedy_ids=seq[GREEDY_PROMPT:], greedy_max_new=GREEDY_NEW,
                greedy_min_margin=min(margins) if margins else None, layout=opt["layout"],
                greedy_use_cache=not opt.get("greedy_no_cache", False), greedy_ids_with_cache=greedy_cached,
                patched_num_hidden_layers=patched, transformers=transformers.__version__,
                torch=torch.__version__, transformers_saved_names=[n for n in names_saved if ".0." in n or
                                                                    "experts.0" in n or "experts.up" in n][:16],
                n_hidden_states=len(hs) if hs is not None else 0)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} reload={reload_maxdiff} patched={patched} hs={meta['n_hidden_states']} "
          f"sizes={ {f_: os.path.getsize(os.path.join(out, f_)) for f_ in os.listdir(out)} }")
    print(f"  saved by save_pretrained: {names_saved[:40]}")


def main():
    out_root = sys.argv[1]
    dbg_root = os.path.join(os.path.dirname(os.path.abspath(out_root)), "dbg")
    os.makedirs(dbg_root, exist_ok=True)
    s = specs()
    rc = 0
    for n in sys.argv[2:] or s:
        try:
            make(n, s[n], out_root, dbg_root)
        except Exception:
            traceback.print_exc()
            rc = 1
    sys.exit(rc)


if __name__ == "__main__":
    main()
