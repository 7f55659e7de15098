#!/usr/bin/env python3
"""mlx-community style fixtures for the hybrid families (qwen3_5 / qwen3_5_moe, qwen3_next,
lfm2 / lfm2_moe, nemotron_h): tiny models quantized as MLX does, under the names and
layouts mlx-lm's sanitize produces. Run on the GPU box (transformers computes the
reference); the conversion itself is numpy only, so `--local` can check it here.

For each fixture: build the tiny transformers model with the family's fixture script
(make_qwen35_fixtures / make_lfm2_fixtures / make_nemotron_fixtures: same configs style,
same real-spread re-initialisation), take its state dict in float64, then
  1. round every tensor to the model dtype (mlx-lm keeps A_log, e_score_correction_bias and
     expert_bias in float32: its cast predicates), as an mlx conversion of it holds them;
  2. apply mlx-lm's sanitize for the family (read in ml-explore/mlx-lm mlx_lm/models/*.py;
     this is our own code):
       qwen3_5 / qwen3_5_moe  every name under language_model. (model.language_model.X ->
                              language_model.model.X, model.X -> language_model.model.X,
                              lm_head -> language_model.lm_head), vision tower and mtp.*
                              dropped, fused experts split into switch_mlp.{gate,up,down}_proj
       qwen3_next             per-expert (or fused) experts stacked into switch_mlp
       both Qwen families     +1.0 added, in the model dtype, to the (1+w) norms
                              (input/post_attention layernorms, final norm, q/k norms), and
                              the DeltaNet conv1d weight moved from [C, 1, K] to [C, K, 1]
       lfm2 / lfm2_moe        conv.conv.weight [C, K, 1]; lfm2_moe renames every w1 / w3 / w2
                              to gate_proj / up_proj / down_proj and stacks the experts
       nemotron_h             backbone. names, conv1d [C, K, 1], experts stacked into
                              switch_mlp.fc1 (up) / switch_mlp.fc2 (down)
     and a tied lm_head is dropped (the quantized embedding is the head);
  3. quantize every module mlx-lm would quantize (Linear, Embedding, SwitchLinear stacks whose
     input width is a multiple of the group; not Conv1d, not Nemotron-H's MoEGate router)
     with MLX's algorithms, as make_mlx_fixtures.py documents them (affine: per-group
     min/max, the larger edge made exact, round half to even, scales / biases stored in the
     model dtype; mxfp4 / mxfp8: E8M0 power-of-two scale from max|w|, nearest code), packed
     as one little-endian bit stream per row in U32 words; per-module overrides as the
     families' quant_predicate writes them (routers 8-bit g64) plus the fixture's own;
  4. write model.safetensors (metadata format=mlx) and config.json with `quantization` and
     `quantization_config`;
  5. load the dequantized values (scales and biases exactly as stored; a shifted norm as
     stored - 1, exact in float64) back into the transformers model under its own names
     (strict), in float64, and record the reference as make_mlx_fixtures.py does:
     ref_logits.f32 [T, vocab] and ref.json (tokens, greedy ids and margins).

Usage:
  python3 make_mlx_hybrid_fixtures.py OUT_DIR [name ...]       (GPU box: torch + transformers)
  python3 make_mlx_hybrid_fixtures.py --local NAME SRC Q_OUT D_OUT
      converts the f32 HF-layout checkpoint SRC (e.g. tests/fixtures/qwen3_5_moe_hub) with
      fixture NAME's recipe into Q_OUT (mlx layout, quantized) and D_OUT (SRC's names,
      dequantized, f32), numpy only, so that the engine can compare the two.
"""
import json
import math
import os
import struct
import sys
import traceback

import numpy as np

SEED = 1234
AFF = "affine"


def q(bits, group, mode=AFF):
    return dict(mode=mode, bits=bits, group_size=group)


# ---- fixture recipes ------------------------------------------------------------------------
# name -> dict(family, T, model (what to build), dtype, default, overrides {mlx module: params})

LIN, FULL = "linear_attention", "full_attention"


def specs():
    s = {}
    # Qwen3.5-MoE as the hub ships it (VL wrapper), 4-bit g32, routers and shared-expert gates
    # 8-bit g64 (qwen3_5 quant_predicate), fused experts -> switch_mlp; bf16.
    s["mlx_qwen3_5_moe_4bit"] = dict(
        family="qwen3_5", T=40, dtype="bf16", default=q(4, 32), predicate="qwen_router",
        model=dict(kind="qwen3_5_moe_vl", cfg="moe"))
    # Dense Qwen3.5 VL wrapper, tied: the 8-bit g64 embedding is the head; one DeltaNet
    # out_proj in mxfp4 and one attention o_proj in mxfp8; bf16.
    s["mlx_qwen3_5_8bit_tied"] = dict(
        family="qwen3_5", T=40, dtype="bf16", default=q(8, 64),
        overrides={"language_model.model.layers.0.linear_attn.out_proj": q(4, 32, "mxfp4"),
                   "language_model.model.layers.1.self_attn.o_proj": q(8, 32, "mxfp8")},
        model=dict(kind="qwen3_5_vl", cfg="dense_tied"))
    # Qwen3-Next: fused in_proj_qkvz / in_proj_ba quantized, experts stacked, mlp_only layer
    # dense, routers and shared-expert gates 8-bit g64; 4-bit g32; bf16.
    s["mlx_qwen3_next_4bit"] = dict(
        family="qwen3_next", T=40, dtype="bf16", default=q(4, 32), predicate="qwen_router",
        model=dict(kind="qwen3_next", cfg="next"))
    # LFM2: conv [C, K, 1], tied 4-bit g32 embedding as the head; bf16.
    s["mlx_lfm2_4bit"] = dict(family="lfm2", T=40, dtype="bf16", default=q(4, 32), model=dict(kind="lfm2"))
    # LFM2-MoE: gate/up/down_proj names, switch_mlp experts, router 8-bit g64, expert_bias f32;
    # 6-bit g32 with one expert stack in mxfp4; bf16.
    s["mlx_lfm2_moe_6bit"] = dict(family="lfm2_moe", T=40, dtype="bf16", default=q(6, 32), predicate="lfm2_router",
                                  overrides={"model.layers.3.feed_forward.switch_mlp.up_proj": q(4, 32, "mxfp4")},
                                  model=dict(kind="lfm2_moe"))
    # Nemotron-H: Mamba2 + attention + relu2 MLP + latent MoE, backbone. names, experts as
    # switch_mlp.fc1 / fc2 (one in mxfp8), router unquantized; 4-bit g32; bf16.
    s["mlx_nemotron_h_4bit"] = dict(family="nemotron_h", T=40, dtype="bf16", default=q(4, 32),
                                    overrides={"backbone.layers.4.mixer.switch_mlp.fc2": q(8, 32, "mxfp8")},
                                    model=dict(kind="nemotron_h"))
    return s


# ---- dtypes (numpy has no bfloat16: rounded by hand) -----------------------------------------

def round_to(a, dt):
    """float64 array -> float64 array of the nearest values of dtype dt (bf16: to nearest even)."""
    a = np.asarray(a, dtype=np.float64)
    if dt == "f32":
        return a.astype(np.float32).astype(np.float64)
    if dt == "f16":
        return a.astype(np.float16).astype(np.float64)
    assert dt == "bf16", dt
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


def raw(a, dt):
    """Bytes of a (already representable in dt) stored as dt, little-endian."""
    a = np.ascontiguousarray(a)
    if dt == "f32":
        return a.astype("<f4").tobytes()
    if dt == "f16":
        return a.astype("<f2").tobytes()
    if dt == "bf16":
        return (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    if dt == "f64":
        return a.astype("<f8").tobytes()
    if dt == "u8":
        return a.astype(np.uint8).tobytes()
    raise ValueError(dt)


ST = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "u8": "U8"}

# ---- MLX quantization --------------------------------------------------------------------

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _e4m3_table():
    v = []
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        x = (1 + m / 8) * 2.0 ** (e - 7) if e else (m / 8) * 2.0 ** -6
        if c & 0x7F == 0x7F:
            x = float("nan")
        v.append(-x if s else x)
    return np.array(v)


E4M3 = _e4m3_table()


def to_e4m3(v):
    """float64 array -> E4M3 codes: nearest, ties to the even code, saturating at 448."""
    mag = np.minimum(np.abs(v), 448.0)
    pos = E4M3[:0x7F]                                  # codes 0..0x7e, increasing
    hi = np.clip(np.searchsorted(pos, mag), 0, 0x7E)
    lo = np.clip(hi - 1, 0, None)
    dlo, dhi = np.abs(mag - pos[lo]), np.abs(pos[hi] - mag)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo)
    return np.where(np.signbit(v), code | 0x80, code).astype(np.int64)


def quantize(w, p, md):
    """w: float64 [..., C] holding model-dtype values. Returns (codes int64 [..., C],
    scales (float64 values of dtype md, or uint8 E8M0), biases or None, dequantized float64)."""
    mode, bits, g = p["mode"], p["bits"], p["group_size"]
    shp = w.shape
    wg = w.reshape(*shp[:-1], shp[-1] // g, g)
    if mode == AFF:
        x = wg.astype(np.float32)
        n_bins = np.float32((1 << bits) - 1)
        w_max, w_min = x.max(-1, keepdims=True), x.min(-1, keepdims=True)
        mask = np.abs(w_min) > np.abs(w_max)
        scale = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7))
        scale = np.where(mask, scale, -scale).astype(np.float32)
        edge = np.where(mask, w_min, w_max).astype(np.float32)
        q0 = np.rint(edge / scale)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(q0 != 0, edge / q0, scale).astype(np.float32)
        bias = np.where(q0 == 0, np.float32(0), edge).astype(np.float32)
        codes = np.clip(np.rint((x - bias) / scale), 0, n_bins).astype(np.int64)
        s_st, b_st = round_to(scale, md), round_to(bias, md)
        deq = codes.astype(np.float64) * s_st + b_st
        return codes.reshape(shp), s_st[..., 0], b_st[..., 0], deq.reshape(shp)
    maxval = 6.0 if mode == "mxfp4" else 448.0
    x = round_to(wg, md)
    sc = round_to(np.abs(x).max(-1, keepdims=True) / maxval, md).astype(np.float32)
    with np.errstate(divide="ignore"):
        e = np.where(sc == 0, 0.0, np.rint(np.log2(np.where(sc == 0, 1, sc))))
    e = np.clip(e, -127, 127)
    xs = round_to(x / np.power(2.0, e), md)
    if mode == "mxfp4":
        codes = np.abs(xs[..., None] - E2M1).argmin(-1)    # first of equals on ties
        vals = E2M1[codes]
    else:
        codes = to_e4m3(xs)
        vals = E4M3[codes]
    deq = vals * np.power(2.0, e)
    return codes.reshape(shp), (e + 127).astype(np.uint8)[..., 0], None, deq.reshape(shp)


def pack(codes, bits):
    """int64 codes [..., C] -> uint8 [..., C * bits / 8]: one little-endian bit stream per row."""
    b = (codes[..., None] >> np.arange(bits)) & 1
    b = b.reshape(*codes.shape[:-1], codes.shape[-1] * bits // 8, 8)
    return (b << np.arange(8)).sum(-1).astype(np.uint8)


# ---- mlx-lm's sanitize, then quantization ----------------------------------------------------

KEEP_F32 = ("A_log", "e_score_correction_bias", "expert_bias")
QWEN_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
              ".q_norm.weight", ".k_norm.weight")


def mlx_name(family, name):
    """A tensor's name after mlx-lm's sanitize (before expert stacking), or None if dropped."""
    if name.startswith("mtp.") or ".mtp." in name or "visual." in name or name.startswith("vision_tower"):
        return None
    if family == "qwen3_5":
        if name.startswith("model.language_model."):
            return "language_model.model." + name[len("model.language_model."):]
        if name.startswith("language_model."):
            return name
        return "language_model." + name
    if family == "nemotron_h" and name.startswith("model."):
        return "backbone." + name[len("model."):]
    if family == "lfm2_moe":
        for old, new in (("w1.weight", "gate_proj.weight"), ("w2.weight", "down_proj.weight"),
                         ("w3.weight", "up_proj.weight")):
            if name.endswith(old):
                return name[: -len(old)] + new
    return name


def predicate(opt, path):
    """The module's quantization (dict) or None: the fixture's override, the family's
    quant_predicate, else the default."""
    ov = opt.get("overrides", {})
    if path in ov:
        return ov[path], True
    pr = opt.get("predicate")
    if pr == "qwen_router" and (path.endswith("mlp.gate") or path.endswith("shared_expert_gate")):
        return q(8, 64), True
    if pr == "lfm2_router" and path.endswith("feed_forward.gate"):
        return q(8, 64), True
    return opt["default"], False


def convert(sd, cfg, opt, skip=()):
    """sd: HF name -> float64 array (in-memory or saved names). Returns (tensors: mlx name ->
    (st dtype, shape, bytes), deq: HF name -> float64 the quantized model computes with,
    the quantization block). Names in skip (buffers that are not checkpoint tensors, e.g.
    rotary inv_freq) are neither written nor rounded."""
    family, md = opt["family"], opt["dtype"]
    text = cfg.get("text_config", cfg)
    tied = bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    qwen = family in ("qwen3_5", "qwen3_next")
    sd = {k: v for k, v in sd.items() if k not in skip}
    deq = {k: (round_to(v, "f32") if k.endswith(KEEP_F32) else round_to(v, md)) for k, v in sd.items()}
    out = {}
    d = opt["default"]
    block = dict(group_size=d["group_size"], bits=d["bits"], mode=d["mode"])

    def put(name, a, dt):
        out[name] = (ST[dt], list(a.shape), raw(a, dt))

    def module(path, w, write_back):
        """One quantizable module [..., R, C] (float64 model-dtype values)."""
        p, explicit = predicate(opt, path)
        if w.shape[-1] % p["group_size"] == 0:
            codes, s, b, dq = quantize(w, p, md)
            out[path + ".weight"] = ("U32", list(w.shape[:-1]) + [w.shape[-1] * p["bits"] // 32],
                                     pack(codes, p["bits"]).tobytes())
            if b is not None:
                put(path + ".scales", s, md)
                put(path + ".biases", b, md)
            else:
                put(path + ".scales", s, "u8")
            if explicit:
                block[path] = dict(group_size=p["group_size"], bits=p["bits"])
                if p["mode"] != AFF:
                    block[path]["mode"] = p["mode"]
            write_back(dq)
        else:
            put(path + ".weight", w, md)      # mlx-lm leaves it unquantized, no config entry

    names = sorted(deq)
    embed = next((n for n in names if n.endswith("embed_tokens.weight") or n.endswith("embeddings.weight")), None)
    head = next((n for n in names if n.endswith("lm_head.weight")), None)
    done = set()
    for name in names:
        if name in done:
            continue
        mn = mlx_name(family, name)
        if mn is None or "rotary_emb" in name or (tied and name == head):
            continue
        w = deq[name]
        # per-expert <pre>.experts.<e>.<leaf>.weight: stack the experts (mlx-lm sanitize)
        parts = mn.split(".experts.")
        if len(parts) == 2 and parts[1].split(".")[0].isdigit() and mn.endswith(".weight"):
            leaf = parts[1].split(".", 1)[1][: -len(".weight")]
            hpre = name.split(".experts.")[0]
            hleaf = name.split(".experts.")[1].split(".", 1)[1]
            E = 0
            while f"{hpre}.experts.{E}.{hleaf}" in deq:
                E += 1
            members = [f"{hpre}.experts.{e}.{hleaf}" for e in range(E)]
            done.update(members)
            if family == "nemotron_h":
                leaf = {"up_proj": "fc1", "down_proj": "fc2"}[leaf]

            def wb_stack(dq, members=members):
                for e, n in enumerate(members):
                    deq[n] = dq[e]
            module(f"{parts[0]}.switch_mlp.{leaf}", np.stack([deq[n] for n in members]), wb_stack)
            continue
        # fused experts: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I];
        # Nemotron-H's relu2 stacks up_proj [E, I, H] / down_proj [E, H, I]
        fl = mn[: -len(".weight")] if mn.endswith(".weight") else mn
        if w.ndim == 3 and ".experts." in fl and fl.rsplit(".", 1)[-1] in ("gate_up_proj", "up_proj", "down_proj"):
            pre, leaf = fl.rsplit(".experts.", 1)
            if leaf == "gate_up_proj":
                I = w.shape[1] // 2

                def wb_g(dq, name=name, I=I):
                    deq[name][:, :I] = dq

                def wb_u(dq, name=name, I=I):
                    deq[name][:, I:] = dq
                module(pre + ".switch_mlp.gate_proj", w[:, :I].copy(), wb_g)
                module(pre + ".switch_mlp.up_proj", w[:, I:].copy(), wb_u)
            else:
                if family == "nemotron_h":
                    leaf = {"up_proj": "fc1", "down_proj": "fc2"}[leaf]

                def wb_f(dq, name=name):
                    deq[name] = dq
                module(pre + ".switch_mlp." + leaf, w, wb_f)
            continue
        # MTP layers past num_hidden_layers: dropped by mlx-lm
        sp = mn.split(".")
        if "layers" in sp:
            i = sp.index("layers")
            if i + 1 < len(sp) and sp[i + 1].isdigit() and int(sp[i + 1]) >= text.get("num_hidden_layers", 1 << 30):
                continue
        # depthwise conv weights [C, 1, K] -> [C, K, 1] (same values in the same order)
        if w.ndim == 3 and ("conv1d.weight" in mn or mn.endswith("conv.conv.weight")):
            if w.shape[1] == 1 and w.shape[2] != 1:
                put(mn, w.reshape(w.shape[0], w.shape[2], 1), md)
            else:
                put(mn, w, md)
            continue
        # Qwen's (1+w) norms: +1.0 in the model dtype; the reference uses stored - 1
        if qwen and w.ndim == 1 and mn.endswith(QWEN_NORMS):
            stored = round_to(w + 1.0, md)
            put(mn, stored, md)
            deq[name] = stored - 1.0
            continue
        not_q = family == "nemotron_h" and mn.endswith(".mixer.gate.weight")   # MoEGate is not a Linear
        if w.ndim == 2 and mn.endswith(".weight") and not not_q:
            def wb_m(dq, name=name):
                deq[name] = dq
            module(mn[: -len(".weight")], w, wb_m)
            continue
        put(mn, w, "f32" if name.endswith(KEEP_F32) else md)
    if tied and head is not None and embed is not None:
        deq[head] = deq[embed]
    return out, deq, block


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype, shape, bytes); larger elements first so that every tensor is
    aligned to its element size (header padded to 8)."""
    size = {"F64": 8, "F32": 4, "U32": 4, "BF16": 2, "F16": 2, "U8": 1}
    names = sorted(tensors, key=lambda n: (-size[tensors[n][0]], n))
    hdr, off = {}, 0
    for n in names:
        dt, shape, b = tensors[n]
        assert len(b) == size[dt] * math.prod(shape), (n, dt, shape, len(b))
        hdr[n] = dict(dtype=dt, shape=shape, data_offsets=[off, off + len(b)])
        off += len(b)
    if metadata:
        hdr["__metadata__"] = metadata
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for n in names:
            f.write(tensors[n][2])


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    sd = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        sd[k] = np.frombuffer(data[a:b], dtype="<f4").astype(np.float64).reshape(v["shape"])
    return sd


def with_quant(c, block):
    c = dict(c)
    c["quantization"] = block
    c["quantization_config"] = block
    return c


def local(name, src, qout, dout):
    """Numpy-only conversion of an f32 HF-layout checkpoint (see the usage)."""
    opt = specs()[name]
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    sd = read_safetensors(os.path.join(src, "model.safetensors"))
    tensors, deq, block = convert(sd, cfg, opt)
    os.makedirs(qout, exist_ok=True)
    os.makedirs(dout, exist_ok=True)
    write_safetensors(os.path.join(qout, "model.safetensors"), tensors, {"format": "mlx"})
    with open(os.path.join(qout, "config.json"), "w") as f:
        json.dump(with_quant(cfg, block), f, indent=2)
    write_safetensors(os.path.join(dout, "model.safetensors"),
                      {k: ("F32", list(v.shape), raw(v, "f32")) for k, v in deq.items()})
    with open(os.path.join(dout, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{name}: {len(tensors)} mlx tensors, {sum(len(t[2]) for t in tensors.values())} bytes, "
          f"block {json.dumps(block)}")


# ---- the GPU-box fixtures ------------------------------------------------------------------

def build(opt):
    """(model, its config.json as a dict, eos, pad, vocab) for the fixture's model recipe."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    m = opt["model"]
    kind = m["kind"]
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, kind)))
    torch.manual_seed(SEED)
    if kind.startswith("qwen3_5") or kind == "qwen3_next":
        import make_qwen35_fixtures as mq
        lin = dict(mq.COMMON)
        if m["cfg"] == "moe":
            c = dict(lin, num_hidden_layers=4, tie_word_embeddings=False, layer_types=[LIN, FULL, LIN, FULL],
                     num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                     shared_expert_intermediate_size=48, rope_parameters=dict(mq.ROPE35))
        elif m["cfg"] == "dense_tied":
            c = dict(lin, intermediate_size=96, num_hidden_layers=3, tie_word_embeddings=True,
                     layer_types=[LIN, FULL, LIN], rope_parameters=dict(mq.ROPE35))
        else:
            c = dict(lin, intermediate_size=96, num_hidden_layers=4, tie_word_embeddings=False,
                     layer_types=[LIN, LIN, LIN, FULL], num_experts=8, num_experts_per_tok=2,
                     moe_intermediate_size=32, shared_expert_intermediate_size=64, decoder_sparse_step=1,
                     mlp_only_layers=[1], norm_topk_prob=True,
                     rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))
        model, model_type, by_hand = mq.make_model(dict(kind=kind, cfg=c))
        if by_hand:
            raise RuntimeError(f"{kind}: this transformers cannot build the VL wrapper")
        mq.reinit(model, gen)
        kw = c
    elif kind in ("lfm2", "lfm2_moe"):
        import make_fixtures as mf
        import make_lfm2_fixtures as ml
        kw = dict(ml.LFM2, num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "conv"]) \
            if kind == "lfm2" else dict(ml.MOE)
        extra = dict(experts_implementation="eager") if kind == "lfm2_moe" else {}
        cfg = AutoConfig.for_model(kind, **kw)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32, **extra)
        mf.reinit(model, gen)
        with torch.no_grad():
            for bn, b in model.named_buffers():
                if bn.endswith("expert_bias") and b is not None:
                    b.copy_(torch.randn(b.shape, generator=gen, dtype=torch.float64) * 0.3)
    else:
        import make_nemotron_fixtures as mn
        pattern = "M-M*EM"
        kw = dict(mn.BASE, mamba_num_heads=4, mamba_head_dim=16, n_groups=2, ssm_state_size=32, chunk_size=16,
                  time_step_min=0.001, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
                  norm_topk_prob=True, routed_scaling_factor=2.5, moe_intermediate_size=32,
                  moe_shared_expert_intermediate_size=64, moe_latent_size=32)
        cfg = AutoConfig.for_model("nemotron_h", hybrid_override_pattern=pattern, num_hidden_layers=len(pattern), **kw)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32,
                                                 experts_implementation="eager")
        if not any("fc1_latent_proj" in n for n, _ in model.named_parameters()):
            raise RuntimeError("this transformers has no Nemotron-H latent projections")
        mn.reinit(model, gen)
    model.eval()
    return model, kw


def make(name, opt, out_root):
    import torch
    import transformers
    model, kw = build(opt)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.config.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    text = c.get("text_config", c)
    if "num_hidden_layers" not in text:
        text["num_hidden_layers"] = model.config.get_text_config().num_hidden_layers
    dname = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[opt["dtype"]]
    c["dtype"] = dname
    if "text_config" in c:
        c["text_config"]["dtype"] = dname
    model = model.to(torch.float64)
    full = model.state_dict()
    # buffers that checkpoints do not hold (rotary inv_freq, ...) and non-float tensors stay as they are
    skip = {n for n, _ in model.named_buffers() if not n.endswith(KEEP_F32)}
    skip |= {k for k, v in full.items() if not v.is_floating_point()}
    sd = {k: v.detach().cpu().numpy().astype(np.float64).copy() for k, v in full.items() if k not in skip}
    print(f"  {name}: {len(sd)} tensors converted, kept as they are: {sorted(k for k in full if k in skip)[:8]}")
    tensors, deq, block = convert(sd, c, opt, skip)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "mlx"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(with_quant(c, block), f, indent=2)
    for junk in ("generation_config.json",):
        if os.path.exists(os.path.join(out, junk)):
            os.remove(os.path.join(out, junk))

    # The reference: the same model holding exactly what the mlx checkpoint computes with.
    before = {k: v.copy() for k, v in sd.items()}
    missing = set(sd) - set(deq)
    assert not missing, missing
    model.load_state_dict({k: (torch.from_numpy(deq[k]) if k in sd else full[k].clone()) for k in full}, strict=True)
    ref = model
    ref.eval()
    moved = max(float(np.abs(deq[k] - before[k]).max()) for k in sd if before[k].size)
    V, T = kw["vocab_size"], opt["T"]
    g = torch.Generator().manual_seed(SEED + 7)
    tokens = torch.randint(3, V, (T,), generator=g)
    with torch.no_grad():
        logits = ref(input_ids=tokens[None]).logits[0]
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))
    gp, gn = 8, 16
    prompt = tokens[:gp]
    with torch.no_grad():
        res = ref.generate(prompt[None], attention_mask=torch.ones(1, gp, dtype=torch.long), max_new_tokens=gn,
                           do_sample=False, output_scores=True, return_dict_in_generate=True,
                           eos_token_id=kw["eos_token_id"], pad_token_id=kw["pad_token_id"])
    seq = res.sequences[0].tolist()
    margins = [float(torch.topk(sc[0].to(torch.float64), 2).values.diff().abs()) for sc in res.scores]
    # transformers' own decode path against its prefill (recorded, not required)
    try:
        rows, pkv = [], None
        with torch.no_grad():
            for t in range(T):
                o = ref(input_ids=tokens[None, t:t + 1], past_key_values=pkv, use_cache=True)
                pkv = o.past_key_values
                rows.append(o.logits[0, -1])
        hf_steps = float((torch.stack(rows) - logits).abs().max())
    except Exception as e:  # noqa: BLE001
        hf_steps = f"{type(e).__name__}: {e}"[:200]
    meta = dict(name=name, model_type=c["model_type"], dtype="mlx-" + opt["dtype"], tokens=tokens.tolist(),
                vocab_size=V, max_abs_ref=float(logits.abs().max()), greedy_prompt=prompt.tolist(),
                greedy_ids=seq[gp:], greedy_max_new=gn, greedy_min_margin=min(margins) if margins else None,
                quantization=block, hf_step_vs_prefill=hf_steps, max_weight_change=moved,
                mlx_tensors=sorted(tensors)[:40], transformers=transformers.__version__, torch=torch.__version__)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    size = sum(os.path.getsize(os.path.join(out, f_)) for f_ in os.listdir(out))
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} hf_steps={hf_steps} moved={moved:.3g} bytes={size} "
          f"tensors={len(tensors)}", flush=True)
    print("  state dict:", sorted(sd)[:12], "...", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--local":
        local(*sys.argv[2:6])
        return
    out_root = sys.argv[1]
    s = specs()
    failed = []
    for n in sys.argv[2:] or s:
        try:
            make(n, s[n], out_root)
        except Exception:  # noqa: BLE001 - keep going: one run makes every fixture
            traceback.print_exc()
            failed.append(n)
        sys.stdout.flush()
    print("FAILED:" if failed else "all made", failed)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
