#!/usr/bin/env python3
"""mlx-community style fixtures: tiny models quantized as MLX does, under mlx-lm's names
(run on the GPU box; transformers computes the reference).

For each fixture: build a tiny transformers model from a config, re-initialise it with real
spread (make_fixtures.reinit), round every tensor to the model dtype (as an mlx conversion
of a bf16 / f16 checkpoint holds it), quantize the quantizable modules with MLX's algorithms
(written here from MLX's documented behaviour, no MLX code):
  affine  per group of `group_size` columns: w_min / w_max; scale = (max - min) / (2^bits - 1)
          (at least 1e-7), signed towards the larger edge; that edge becomes exact
          (q0 = round(edge / scale), scale = edge / q0, bias = edge); q = round((w - bias) /
          scale) clipped to [0, 2^bits - 1]; scales and biases stored in the model dtype.
  mxfp4 / mxfp8  per group of 32: scale = 2^round(log2(max|w| / 6 or 448)) stored as E8M0
          (exponent + 127); codes are the nearest E2M1 value (first on ties) or the E4M3
          rounding (to nearest even, saturating) of w / scale.
Codes are packed as MLX packs them: one little-endian bit stream per row, stored as U32.
Then write them under mlx-lm's post-sanitize names and layouts:
  <module>.weight (U32), .scales, .biases; routed experts stacked as
  mlp.switch_mlp.{gate,up,down}_proj [E, out, in]; DeepSeek's kv_b_proj split into the
  MultiLinear embed_q [H, kv_lora, nope] (W_UK transposed) and unembed_out [H, v, kv_lora];
  lm_head dropped when tied (the quantized embedding is the head);
plus config.json with `quantization` and its copy `quantization_config` (defaults and the
per-module entries mlx-lm writes, e.g. the 8-bit MoE router). The float64 reference runs the
transformers model whose parameters are the dequantized values (scales and biases exactly as
stored), so the engine must match it to float32 accuracy:
  ref_logits.f32 [T, vocab] and ref.json (tokens, greedy ids, margins), as make_fixtures.py.

Usage:
  python3 make_mlx_fixtures.py OUT_DIR [name ...]          (GPU box: transformers + torch)
  python3 make_mlx_fixtures.py --selftest SPEC SRC Q_OUT D_OUT
      converts the f32 checkpoint SRC (HF names, e.g. from `cinfer make-random`) with fixture
      SPEC's recipe into Q_OUT (mlx layout) and D_OUT (the dequantized weights, f32, SRC's
      names), so the engine can compare the two without transformers (torch only).
"""
import json
import math
import os
import struct
import sys

import torch

SEED = 1234

# ---- fixture recipes ----------------------------------------------------------------------

AFF = "affine"


def q(bits, group, mode=AFF):
    return dict(mode=mode, bits=bits, group_size=group)


LLAMA = dict(vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
             rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)
QWEN3 = dict(LLAMA, intermediate_size=192)
QWEN3_MOE = dict(LLAMA, num_hidden_layers=3, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], tie_word_embeddings=False,
                 rope_parameters=dict(rope_type="default", rope_theta=1000000.0))
DSV3 = dict(vocab_size=300, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=64,
            qk_rope_head_dim=16, v_head_dim=64, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
            n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
            max_position_embeddings=1024, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            tie_word_embeddings=False, rope_interleave=True,
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=8.0,
                                 original_max_position_embeddings=128, beta_fast=32.0, beta_slow=1.0,
                                 mscale=1.0, mscale_all_dim=1.0))


def specs():
    """name -> (model_type, config kwargs, options). Options: dtype (model dtype: scales,
    biases and unquantized tensors), default (the block's defaults), overrides
    {module: params | False}, not_quantizable (module path suffixes that mlx-lm builds as
    plain modules without to_quantized)."""
    s = {}
    # Llama 4-bit g64 everywhere, embedding and untied head included; bf16.
    s["mlx_llama_4bit"] = ("llama", dict(LLAMA, tie_word_embeddings=False, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=64)), dict(dtype="bf16", default=q(4, 64)))
    # Qwen3 8-bit g32, tied: the quantized embedding is also the head; f16.
    s["mlx_qwen3_8bit_tied"] = ("qwen3", dict(QWEN3, tie_word_embeddings=True, rope_parameters=dict(
        rope_type="default", rope_theta=1000000.0)), dict(dtype="f16", default=q(8, 32)))
    # Qwen3, untied, every affine width and group, mxfp4 / mxfp8 modules, one module left
    # unquantized by a `false` entry; f32 (scales in f32).
    s["mlx_qwen3_mixed"] = ("qwen3", dict(QWEN3, intermediate_size=256, tie_word_embeddings=False, rope_parameters=dict(
        rope_type="default", rope_theta=10000.0)), dict(dtype="f32", default=q(4, 64), overrides={
            "model.embed_tokens": q(6, 128),
            "lm_head": q(8, 128),
            "model.layers.0.self_attn.q_proj": q(3, 32),
            "model.layers.0.self_attn.k_proj": q(2, 64),
            "model.layers.0.self_attn.v_proj": q(5, 32),
            "model.layers.0.mlp.down_proj": q(6, 128),
            "model.layers.1.self_attn.o_proj": False,
            "model.layers.1.mlp.gate_proj": q(4, 32, "mxfp4"),
            "model.layers.1.mlp.up_proj": q(8, 32, "mxfp8"),
            "model.layers.1.mlp.down_proj": q(8, 64)}))
    # Llama in mxfp4 (embedding and head too), one affine module; bf16.
    s["mlx_llama_mxfp4"] = ("llama", dict(LLAMA, num_key_value_heads=1, tie_word_embeddings=False,
                                          rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
                            dict(dtype="bf16", default=q(4, 32, "mxfp4"), overrides={
                                "lm_head": q(8, 32, "mxfp8"),
                                "model.layers.1.self_attn.v_proj": q(4, 64)}))
    # Qwen3-MoE: switch_mlp stacks, 4-bit g64, routers 8-bit g64 (mlx-lm's quant_predicate); bf16.
    s["mlx_qwen3_moe_4bit"] = ("qwen3_moe", dict(QWEN3_MOE), dict(dtype="bf16", default=q(4, 64), overrides={
        f"model.layers.{l}.mlp.gate": q(8, 64) for l in (0, 2)}))
    # DeepSeek V3: split kv_b_proj (quantized MultiLinear embed_q / unembed_out), switch_mlp
    # experts, shared experts, 4-bit g64; bf16.
    # (mlx-lm's MoEGate is a plain module, not a Linear: the router stays bf16.)
    s["mlx_deepseek_v3_4bit"] = ("deepseek_v3", dict(DSV3), dict(dtype="bf16", default=q(4, 64),
                                                                  not_quantizable=[".mlp.gate"]))
    return s


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
ST_NAMES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


# ---- MLX quantization ---------------------------------------------------------------------

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                    dtype=torch.float64)


def e4m3_values():
    """Value of every E4M3 code (NaN for 0x7f / 0xff)."""
    v = []
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        x = (1 + m / 8) * 2.0 ** (e - 7) if e else (m / 8) * 2.0 ** -6
        if c & 0x7f == 0x7f:
            x = float("nan")
        v.append(-x if s else x)
    return torch.tensor(v, dtype=torch.float64)


E4M3 = e4m3_values()


def to_e4m3(v):
    """float tensor -> uint8 E4M3 codes: round to nearest, ties to even, saturating at 448."""
    mag = v.abs().to(torch.float64).clamp(max=448.0)
    pos = E4M3[:0x7f]                       # codes 0..0x7e, increasing
    hi = torch.searchsorted(pos, mag).clamp(max=0x7e)
    lo = (hi - 1).clamp(min=0)
    dlo, dhi = (mag - pos[lo]).abs(), (pos[hi] - mag).abs()
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = torch.where(pick_hi, hi, lo)
    code = torch.where(torch.signbit(v), code | 0x80, code)
    return code.to(torch.int64)


def quantize(w, p, md):
    """w: float64 [..., R, C], already rounded to the model dtype md. Returns (codes int64
    [..., R, C], scales tensor, biases tensor or None, dequantized float64 [..., R, C])."""
    mode, bits, g = p["mode"], p["bits"], p["group_size"]
    shp = w.shape
    wg = w.reshape(*shp[:-1], shp[-1] // g, g)
    if mode == AFF:
        x = wg.to(torch.float32)
        n_bins = float((1 << bits) - 1)
        w_max, w_min = x.amax(-1, keepdim=True), x.amin(-1, keepdim=True)
        mask = w_min.abs() > w_max.abs()
        scale = torch.clamp((w_max - w_min) / n_bins, min=1e-7)
        scale = torch.where(mask, scale, -scale)
        edge = torch.where(mask, w_min, w_max)
        q0 = torch.round(edge / scale)
        scale = torch.where(q0 != 0, edge / q0, scale)
        bias = torch.where(q0 == 0, torch.zeros_like(edge), edge)
        codes = torch.clamp(torch.round((x - bias) / scale), 0, n_bins).to(torch.int64)
        s_st, b_st = scale.to(md), bias.to(md)
        deq = codes.to(torch.float64) * s_st.to(torch.float64) + b_st.to(torch.float64)
        return codes.reshape(shp), s_st.squeeze(-1), b_st.squeeze(-1), deq.reshape(shp)
    maxval = 6.0 if mode == "mxfp4" else 448.0
    x = wg.to(md)
    sc = (x.abs().amax(-1, keepdim=True) / maxval).to(md).to(torch.float32)
    e = torch.where(sc == 0, torch.zeros_like(sc), torch.round(torch.log2(sc))).clamp(-127, 127)
    xs = (x.to(torch.float64) / torch.pow(2.0, e.to(torch.float64))).to(md)
    if mode == "mxfp4":
        codes = (xs.to(torch.float64).unsqueeze(-1) - E2M1).abs().argmin(-1)
        vals = E2M1[codes]
    else:
        codes = to_e4m3(xs)
        vals = E4M3[codes]
    deq = vals * torch.pow(2.0, e.to(torch.float64))
    return codes.reshape(shp), (e + 127).to(torch.uint8).squeeze(-1), None, deq.reshape(shp)


def pack(codes, bits):
    """int64 codes [..., C] -> uint8 [..., C * bits / 8]: little-endian bit stream per row."""
    b = (codes.unsqueeze(-1) >> torch.arange(bits)) & 1                 # [..., C, bits]
    b = b.reshape(*codes.shape[:-1], codes.shape[-1] * bits // 8, 8)   # bytes
    return (b << torch.arange(8)).sum(-1).to(torch.uint8)


# ---- conversion to mlx-lm's layout --------------------------------------------------------

def convert(sd, cfg, opt):
    """sd: name -> float64 tensor (HF names: in-memory fused experts or saved per-expert).
    Returns (tensors: name -> (st dtype, shape, bytes), deq: name -> float64 like sd, block)."""
    md = DTYPES[opt["dtype"]]
    default, overrides = opt["default"], opt.get("overrides", {})
    tied = bool(cfg.get("tie_word_embeddings"))
    deq = {k: v.to(md).to(torch.float64) for k, v in sd.items()}    # what the mlx model holds
    out = {}
    block = dict(group_size=default["group_size"], bits=default["bits"], mode=default["mode"])

    def raw(t):
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().tobytes()
        return t.contiguous().numpy().tobytes()

    def st_dtype(t):
        return {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.uint8: "U8"}[t.dtype]

    def put(name, t):
        out[name] = (st_dtype(t), list(t.shape), raw(t))

    def module(path, w, write_back):
        """One quantizable module [..., R, C] (float64, model-dtype values)."""
        p = overrides.get(path, default)
        if any(path.endswith(x) for x in opt.get("not_quantizable", [])):
            p = None
        if p and w.shape[-1] % p["group_size"] == 0:
            codes, s, b, dq = quantize(w, p, md)
            packed = pack(codes, p["bits"])
            out[path + ".weight"] = ("U32", list(w.shape[:-1]) + [w.shape[-1] * p["bits"] // 32],
                                     packed.contiguous().numpy().tobytes())
            put(path + ".scales", s)
            if b is not None:
                put(path + ".biases", b)
            if path in overrides:
                block[path] = dict(group_size=p["group_size"], bits=p["bits"])
                if p["mode"] != AFF:
                    block[path]["mode"] = p["mode"]
            write_back(dq)
        else:
            if p is False:
                block[path] = False
            put(path + ".weight", w.to(md))

    done = set()
    L = cfg.get("num_hidden_layers", 0)
    for name in sorted(sd):
        if name in done:
            continue
        w = deq[name]
        if tied and name == "lm_head.weight":
            continue
        if "rotary_emb" in name:
            continue
        # DeepSeek kv_b_proj -> embed_q / unembed_out (mlx-lm sanitize)
        if name.endswith("self_attn.kv_b_proj.weight"):
            H, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
            kvv = deq[name].view(H, nope + v, -1)      # a view: write-backs land in deq[name]
            pre = name[: -len("kv_b_proj.weight")]

            def wb_k(dq, kvv=kvv, nope=nope):
                kvv[:, :nope, :] = dq.transpose(1, 2)

            def wb_v(dq, kvv=kvv, nope=nope):
                kvv[:, nope:, :] = dq
            module(pre + "embed_q", kvv[:, :nope, :].transpose(1, 2).contiguous(), wb_k)   # [H, kv_lora, nope]
            module(pre + "unembed_out", kvv[:, nope:, :].contiguous(), wb_v)             # [H, v, kv_lora]
            continue
        # routed experts, in-memory fused form ([E, 2I, H] gate rows first, [E, H, I])
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.gate_up_proj.weight"):
            pre = name[: name.index("experts.gate_up_proj")]
            I = w.shape[1] // 2

            def wb_g(dq, name=name, I=I):
                deq[name][:, :I] = dq

            def wb_u(dq, name=name, I=I):
                deq[name][:, I:] = dq
            module(pre + "switch_mlp.gate_proj", w[:, :I].contiguous(), wb_g)
            module(pre + "switch_mlp.up_proj", w[:, I:].contiguous(), wb_u)
            continue
        if name.endswith("mlp.experts.down_proj") or name.endswith("mlp.experts.down_proj.weight"):
            pre = name[: name.index("experts.down_proj")]

            def wb_d(dq, name=name):
                deq[name] = dq
            module(pre + "switch_mlp.down_proj", w, wb_d)
            continue
        # routed experts, saved per-expert form: stack them (mlx-lm sanitize)
        if ".mlp.experts." in name and name.endswith("_proj.weight"):
            pre, rest = name.split(".mlp.experts.")
            proj = rest.split(".")[1]
            E = 0
            while f"{pre}.mlp.experts.{E}.{proj}.weight" in sd:
                E += 1
            names = [f"{pre}.mlp.experts.{e}.{proj}.weight" for e in range(E)]
            done.update(names)

            def wb_s(dq, names=names):
                for e, n in enumerate(names):
                    deq[n] = dq[e]
            module(f"{pre}.mlp.switch_mlp.{proj}", torch.stack([deq[n] for n in names]), wb_s)
            continue
        # MTP layers past num_hidden_layers are dropped by mlx-lm
        parts = name.split(".")
        if len(parts) > 2 and parts[1] == "layers" and int(parts[2]) >= L:
            continue
        if w.ndim == 2 and name.endswith(".weight") and "norm" not in name:
            base = name[: -len(".weight")]

            def wb_m(dq, name=name):
                deq[name] = dq
            module(base, w, wb_m)
            continue
        put(name, w.to(md))
    if tied and "lm_head.weight" in deq:
        deq["lm_head.weight"] = deq["model.embed_tokens.weight"]
    assert all(t[0] != "F32" or opt["dtype"] == "f32" for t in out.values()), "an f32 tensor in a non-f32 model"
    return out, deq, block


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype, shape, bytes). Larger elements first, so that every tensor
    starts at a multiple of its element size (header padded to 8)."""
    size = {"I64": 8, "F32": 4, "U32": 4, "I32": 4, "BF16": 2, "F16": 2, "U8": 1}
    names = sorted(tensors, key=lambda n: (-size[tensors[n][0]], n))
    hdr, off = {}, 0
    for n in names:
        dt, shape, b = tensors[n]
        assert len(b) == size[dt] * math.prod(shape), n
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


def quant_config(c, block):
    c = dict(c)
    c["quantization"] = block
    c["quantization_config"] = block
    return c


# ---- reading an f32 checkpoint (selftest) --------------------------------------------------

def read_safetensors_f32(path):
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
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(v["shape"])
        sd[k] = t.to(torch.float64)
    return sd


def selftest(spec_name, src, qout, dout):
    _, _, opt = specs()[spec_name]
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    sd = read_safetensors_f32(os.path.join(src, "model.safetensors"))
    tensors, deq, block = convert(sd, cfg, opt)
    os.makedirs(qout, exist_ok=True)
    os.makedirs(dout, exist_ok=True)
    write_safetensors(os.path.join(qout, "model.safetensors"), tensors, {"format": "mlx"})
    with open(os.path.join(qout, "config.json"), "w") as f:
        json.dump(quant_config(cfg, block), f, indent=2)
    dt = {k: ("F32", list(v.shape), v.to(torch.float32).contiguous().numpy().tobytes()) for k, v in deq.items()}
    write_safetensors(os.path.join(dout, "model.safetensors"), dt)
    with open(os.path.join(dout, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{spec_name}: {len(tensors)} mlx tensors, block {json.dumps(block)}")


# ---- the GPU-box fixtures ------------------------------------------------------------------

def make(name, spec, out_root):
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_fixtures as mf

    model_type, kw, opt = spec
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, name)))
    cfg = AutoConfig.for_model(model_type, **kw)
    extra = dict(experts_implementation="eager") if model_type in ("qwen3_moe", "deepseek_v3") else {}
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32, **extra)
    model.eval()
    mf.reinit(model, gen)
    model = model.to(torch.float64)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.config.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    c["dtype"] = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[opt["dtype"]]
    tensors, deq, block = convert(sd, c, opt)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "mlx"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(quant_config(c, block), f, indent=2)
    gc = os.path.join(out, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)

    # The reference: the same model holding exactly the dequantized / dtype-rounded values.
    missing = set(sd) - set(deq)
    assert not missing, missing
    model.load_state_dict({k: deq[k].to(torch.float64) for k in sd}, strict=True)
    ref = model
    ref.eval()
    V = kw["vocab_size"]
    g = torch.Generator().manual_seed(SEED + 7)
    tokens = torch.randint(3, V, (mf.T_PROMPT,), generator=g)
    with torch.no_grad():
        logits = ref(tokens[None]).logits[0]
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "ref_logits.f32"))
    prompt = tokens[: mf.GREEDY_PROMPT]
    with torch.no_grad():
        res = ref.generate(prompt[None], max_new_tokens=mf.GREEDY_NEW, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, eos_token_id=kw["eos_token_id"],
                           pad_token_id=kw["pad_token_id"])
    seq = res.sequences[0].tolist()
    margins = []
    for sc in res.scores:
        top = torch.topk(sc[0].to(torch.float64), 2).values
        margins.append(float(top[0] - top[1]))
    meta = dict(name=name, model_type=model_type, dtype="mlx-" + opt["dtype"], tokens=tokens.tolist(), vocab_size=V,
                max_abs_ref=float(logits.abs().max()), greedy_prompt=prompt.tolist(),
                greedy_ids=seq[mf.GREEDY_PROMPT:], greedy_max_new=mf.GREEDY_NEW,
                greedy_min_margin=min(margins) if margins else None, quantization=block,
                mlx_tensors=sorted(tensors)[:16], transformers=transformers.__version__, torch=torch.__version__)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: max|ref|={meta['max_abs_ref']:.3f} greedy={meta['greedy_ids']} "
          f"min_margin={meta['greedy_min_margin']:.4g} tensors={len(tensors)}", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--selftest":
        selftest(*sys.argv[2:6])
        return
    out_root = sys.argv[1]
    s = specs()
    failed = []
    for n in sys.argv[2:] or s:
        try:
            make(n, s[n], out_root)
        except Exception as e:  # keep going: one run makes every fixture
            import traceback
            traceback.print_exc()
            failed.append(n)
    if failed:
        print("FAILED:", failed)
        sys.exit(1)


if __name__ == "__main__":
    main()
