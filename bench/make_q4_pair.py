#!/usr/bin/env python3
"""The same random weights twice, for the decode comparison with llama.cpp (bench/RESULTS.md):
an mlx-community style 4-bit checkpoint for cinfer and a Q4_0 GGUF for llama.cpp.

Input: a bf16 qwen3_moe checkpoint from `cinfer make-random` (HF names, one tensor per
expert), or a dense qwen3 one (tied or not: e.g. bench/qwen3-0.6b.config.json; the GGUF is then
llama.cpp's "qwen3", no router, and no head tensor when tied); the first LAYERS layers are used. Outputs, both at 4.5 bits per weight:
  OUT/mlx4/      config.json + model.safetensors: MLX affine 4-bit group 64 (scales and
                 biases bf16) for every Linear, the embedding and the head; routers 8-bit
                 group 64 (mlx-lm's qwen3_moe quant_predicate); experts stacked as
                 switch_mlp.{gate,up,down}_proj; norms bf16.
  OUT/q4_0.gguf  llama.cpp's "qwen3moe" architecture (softmax top-k experts, renormalised; q/k
                 RMS norms; NeoX RoPE), every matrix Q4_0 (blocks of 32: one f16 scale, 4-bit
                 codes) like `llama-quantize --pure`, the router and the norms F32: the same
                 function as the mlx checkpoint up to the two quantizations. Written for, and
                 checked against, llama.cpp at unslothai/llama.cpp d32676d77 (an older snapshot
                 without qwen3moe had this file write its "llama" architecture with
                 Mixtral-style experts and no q/k norms). A vocabulary of placeholder tokens
                 satisfies the loader.
Both are written tensor by tensor (numpy, memmapped input), the quantization spread over
MAKE_Q4_JOBS processes (default: the CPUs, at most 8), each holding about one layer's stacked
experts: a few GB of RAM per process suffice.

Usage: python3 bench/make_q4_pair.py SRC_DIR LAYERS OUT_DIR LLAMA_CPP_DIR
(needs numpy, and gguf-py from the llama.cpp checkout; sentencepiece is not needed.)
MAKE_Q_BITS=8 writes OUT/mlx8/ instead (every Linear 8-bit group 64, mlx-community's 8-bit
layout) and no GGUF.
"""
import json
import os
import struct
import sys
import types

import numpy as np


def open_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    return hdr, mm


def load_f32(hdr, mm, name):
    h = hdr[name]
    assert h["dtype"] == "BF16", (name, h["dtype"])
    a, b = h["data_offsets"]
    u = np.frombuffer(mm[a:b], dtype="<u2").astype(np.uint32) << 16
    return u.view(np.float32).reshape(h["shape"])


def to_bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def mlx_affine(w, bits, group):
    """MLX affine quantization of w [R, C] (float32): packed codes (bytes of the U32 words),
    bf16 scales and biases [R, C/group] (bits)."""
    R, C = w.shape
    x = w.reshape(R, C // group, group)
    n_bins = np.float32((1 << bits) - 1)
    w_max, w_min = x.max(-1, keepdims=True), x.min(-1, keepdims=True)
    mask = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7))
    scale = np.where(mask, scale, -scale)
    edge = np.where(mask, w_min, w_max)
    q0 = np.rint(edge / scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(q0 != 0, edge / q0, scale).astype(np.float32)
    bias = np.where(q0 == 0, np.float32(0), edge).astype(np.float32)
    codes = np.clip(np.rint((x - bias) / scale), 0, n_bins).astype(np.uint32).reshape(R, C)
    per = 32 // bits if 32 % bits == 0 else None
    assert per, "bench packs 4- and 8-bit only"
    words = np.zeros((R, C // per), dtype=np.uint32)
    for k in range(per):
        words |= codes[:, k::per] << np.uint32(k * bits)
    return words.astype("<u4"), to_bf16_bits(scale[..., 0]), to_bf16_bits(bias[..., 0])


_JOBS = []


def _run_one(i):
    return i, _JOBS[i]()


def run_jobs(jobs):
    """(index, result) of each job, in order; MAKE_Q4_JOBS worker processes (fork: the jobs are
    closures over the memmapped input, inherited, never pickled; only results travel)."""
    global _JOBS
    n = int(os.environ.get("MAKE_Q4_JOBS", min(8, os.cpu_count() or 1)))
    if n <= 1:
        for i, job in enumerate(jobs):
            yield i, job()
        return
    import multiprocessing as mp
    _JOBS = jobs
    with mp.get_context("fork").Pool(n) as pool:
        yield from pool.imap(_run_one, range(len(jobs)))
    _JOBS = []


def write_mlx(src_hdr, mm, L, cfg, out, qbits=4):
    """Streams the mlx checkpoint: header first (all shapes are known), then each tensor."""
    moe = cfg["model_type"] == "qwen3_moe"
    E, I, D = cfg.get("num_experts", 0), cfg.get("moe_intermediate_size", cfg.get("intermediate_size")), cfg["hidden_size"]
    plan = []          # (name, dtype, shape, job -> [bytes of this and the next len - 1 tensors] or None)

    def plain(name):
        h = src_hdr[name]
        a, b = h["data_offsets"]
        plan.append((name, "BF16", h["shape"], lambda a=a, b=b: [mm[a:b].tobytes()]))

    def quant(base, rows, cols, load, bits=qbits, group=64, stack=0):
        def job():
            ws, ss, bs = [], [], []
            for e in range(stack or 1):
                w, s, b = mlx_affine(load(e), bits, group)
                ws.append(w); ss.append(s); bs.append(b)
            return [np.stack(ws).tobytes(), np.stack(ss).tobytes(), np.stack(bs).tobytes()]
        lead = [stack] if stack else []
        plan.append((base + ".weight", "U32", lead + [rows, cols * bits // 32], job))
        plan.append((base + ".scales", "BF16", lead + [rows, cols // group], None))   # from the job above
        plan.append((base + ".biases", "BF16", lead + [rows, cols // group], None))

    f32 = lambda n: (lambda e: load_f32(src_hdr, mm, n))
    quant("model.embed_tokens", cfg["vocab_size"], D, f32("model.embed_tokens.weight"))
    for l in range(L):
        p = f"model.layers.{l}"
        plain(f"{p}.input_layernorm.weight")
        plain(f"{p}.post_attention_layernorm.weight")
        plain(f"{p}.self_attn.q_norm.weight")
        plain(f"{p}.self_attn.k_norm.weight")
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shp = src_hdr[f"{p}.self_attn.{proj}.weight"]["shape"]
            quant(f"{p}.self_attn.{proj}", shp[0], shp[1], f32(f"{p}.self_attn.{proj}.weight"))
        if not moe:
            for proj, rows, cols in (("gate_proj", I, D), ("up_proj", I, D), ("down_proj", D, I)):
                quant(f"{p}.mlp.{proj}", rows, cols, f32(f"{p}.mlp.{proj}.weight"))
            continue
        quant(f"{p}.mlp.gate", E, D, f32(f"{p}.mlp.gate.weight"), bits=8)
        for proj, rows, cols in (("gate_proj", I, D), ("up_proj", I, D), ("down_proj", D, I)):
            quant(f"{p}.mlp.switch_mlp.{proj}", rows, cols,
                  lambda e, p=p, proj=proj: load_f32(src_hdr, mm, f"{p}.mlp.experts.{e}.{proj}.weight"), stack=E)
    plain("model.norm.weight")
    if not cfg.get("tie_word_embeddings"):
        quant("lm_head", cfg["vocab_size"], D, f32("lm_head.weight"))

    size = {"U32": 4, "BF16": 2}
    hdr, off = {}, 0
    for name, dt, shape, _ in plan:
        nb = size[dt] * int(np.prod(shape))
        hdr[name] = dict(dtype=dt, shape=shape, data_offsets=[off, off + nb])
        off += nb
    hdr["__metadata__"] = {"format": "mlx"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        names = [name for name, _, _, job in plan]
        done = 0
        for i, parts in run_jobs([job for _, _, _, job in plan if job]):
            for b in parts:
                name = names[done]
                assert len(b) == hdr[name]["data_offsets"][1] - hdr[name]["data_offsets"][0], name
                f.write(b)
                done += 1
        assert done == len(plan)
    c = dict(cfg, num_hidden_layers=L)
    block = {"group_size": 64, "bits": qbits, "mode": "affine"}
    for l in range(L if moe else 0):
        block[f"model.layers.{l}.mlp.gate"] = {"group_size": 64, "bits": 8}
    c["quantization"] = block
    c["quantization_config"] = block
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def write_gguf(src_hdr, mm, L, cfg, path, gguf):
    from gguf import quants
    Q = gguf.GGMLQuantizationType
    moe = cfg["model_type"] == "qwen3_moe"
    E, D, V = cfg.get("num_experts", 0), cfg["hidden_size"], cfg["vocab_size"]
    I = cfg.get("moe_intermediate_size", cfg.get("intermediate_size"))
    from make_bf16_gguf import qwen3moe_keys, qwen3_attn_keys   # beside this file (on sys.path)
    w = gguf.GGUFWriter(path, "qwen3moe" if moe else "qwen3")
    if moe:
        qwen3moe_keys(cfg, w, L)
    else:   # as make_bf16_gguf.py's qwen3
        w.add_block_count(L)
        w.add_context_length(4096)
        w.add_embedding_length(D)
        w.add_feed_forward_length(I)
        qwen3_attn_keys(cfg, w)
    w.add_file_type(2)                                   # LLAMA_FTYPE_MOSTLY_Q4_0
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [1] * (V - 3))         # unknown, control, control, normal
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    plan = []          # (gguf name, numpy byte shape, raw dtype, producer -> np.ndarray)

    def q4(name, rows, cols, load, stack=0):
        def prod():
            parts = [quants.quantize(np.ascontiguousarray(load(e), dtype=np.float32), Q.Q4_0) for e in range(stack or 1)]
            return np.stack(parts) if stack else parts[0]
        shape = ([stack] if stack else []) + [rows, cols // 32 * 18]
        plan.append((name, shape, Q.Q4_0, prod))

    def f32(name, src):
        shp = src_hdr[src]["shape"]
        plan.append((name, shp, None, lambda: np.ascontiguousarray(load_f32(src_hdr, mm, src), dtype=np.float32)))

    ld = lambda n: (lambda e: load_f32(src_hdr, mm, n))
    q4("token_embd.weight", V, D, ld("model.embed_tokens.weight"))
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        f32(f"{g}.attn_norm.weight", f"{p}.input_layernorm.weight")
        for proj, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            shp = src_hdr[f"{p}.self_attn.{proj}.weight"]["shape"]
            q4(f"{g}.{gn}.weight", shp[0], shp[1], ld(f"{p}.self_attn.{proj}.weight"))
        f32(f"{g}.attn_q_norm.weight", f"{p}.self_attn.q_norm.weight")
        f32(f"{g}.attn_k_norm.weight", f"{p}.self_attn.k_norm.weight")
        f32(f"{g}.ffn_norm.weight", f"{p}.post_attention_layernorm.weight")
        if not moe:
            for proj, gn, rows, cols in (("gate_proj", "ffn_gate", I, D), ("up_proj", "ffn_up", I, D),
                                         ("down_proj", "ffn_down", D, I)):
                q4(f"{g}.{gn}.weight", rows, cols, ld(f"{p}.mlp.{proj}.weight"))
            continue
        f32(f"{g}.ffn_gate_inp.weight", f"{p}.mlp.gate.weight")
        for proj, gn, rows, cols in (("gate_proj", "ffn_gate_exps", I, D), ("up_proj", "ffn_up_exps", I, D),
                                     ("down_proj", "ffn_down_exps", D, I)):
            q4(f"{g}.{gn}.weight", rows, cols,
               lambda e, p=p, proj=proj: load_f32(src_hdr, mm, f"{p}.mlp.experts.{e}.{proj}.weight"), stack=E)
    f32("output_norm.weight", "model.norm.weight")
    if not cfg.get("tie_word_embeddings"):
        q4("output.weight", V, D, ld("lm_head.weight"))

    for name, shape, raw, _ in plan:
        if raw is None:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint8), int(np.prod(shape)), raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, arr in run_jobs([prod for _, _, _, prod in plan]):
        w.write_tensor_data(arr)
    w.close()


def main():
    src, L, out, lcpp = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    assert (cfg["model_type"] == "qwen3_moe" and not cfg.get("tie_word_embeddings")) or cfg["model_type"] == "qwen3", \
        "an untied qwen3_moe or a qwen3 checkpoint"
    hdr, mm = open_st(os.path.join(src, "model.safetensors"))
    if os.environ.get("MAKE_Q_BITS") == "8":
        write_mlx(hdr, mm, L, cfg, os.path.join(out, "mlx8"), 8)
        print("mlx8 written", flush=True)
        return
    write_mlx(hdr, mm, L, cfg, os.path.join(out, "mlx4"))    # complete once its config.json exists
    print("mlx4 written", flush=True)
    sys.modules.setdefault("sentencepiece", types.SimpleNamespace(SentencePieceProcessor=None))
    sys.path.insert(0, os.path.join(lcpp, "gguf-py"))
    try:
        import gguf
    except ImportError as e:
        sys.exit(f"make_q4_pair: no gguf-py under {lcpp} ({e}): q4_0.gguf not written")
    write_gguf(hdr, mm, L, cfg, os.path.join(out, "q4_0.gguf"), gguf)
    print("q4_0.gguf written", flush=True)


if __name__ == "__main__":
    main()
