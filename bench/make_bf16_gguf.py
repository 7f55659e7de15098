#!/usr/bin/env python3
"""The same random weights for llama.cpp: a bf16 checkpoint from `cinfer make-random` (HF names,
one safetensors file) written as a GGUF that llama.cpp loads, for the side-by-side benchmarks in
bench/RESULTS.md. Families and the llama.cpp architecture each becomes:

  qwen3                        -> "qwen3"           (issue #15, bench/run_llamacpp_dense.sh)
  qwen3_moe                    -> "qwen3moe"        (issue #15, bench/run_llamacpp_moe.sh)
  qwen3_5_moe(_text)           -> "qwen35moe"       (issue #17, tests/gpu/bench.sh BENCH_ONLY=hyb)
  lfm2_moe                     -> "lfm2moe"         (issue #17)
  nemotron_h with routed experts -> "nemotron_h_moe" (issue #17)
  deepseek_v3 / deepseek_v2    -> "deepseek2"       (issue #15, bench/run_llamacpp_moe.sh CONFIG=...)

Every matrix keeps its bf16 bytes (GGML type BF16); expert matrices are streamed one expert after
another into one [n_expert, rows, cols] tensor, never stacked in memory. What llama.cpp's loader
wants in F32, as its own converter writes it, is F32: norms, 1-D tensors, routers, conv kernels,
and names that do not end in ".weight". The transforms llama.cpp's graphs expect (learned from
reading its converter and loaders, written here from scratch):
  qwen35moe   RMSNorm weights w -> 1 + w (every norm but the DeltaNet's gated norm, whose weight
              is used as is); A_log -> A = -exp(A_log) ("ssm_a"); dt_bias -> "ssm_dt.bias";
              conv1d [C, 1, K] -> [C, K]; the value heads of the linear-attention layers reordered
              from grouped by key head (k0v0 k0v1 .. k1v0 ..) to tiled (k0v0 k1v0 .. k0v1 ..) in
              in_proj_qkv's V rows, in_proj_z / in_proj_a / in_proj_b rows, conv1d's V channels,
              A_log, dt_bias and out_proj's columns; the rope sections [11, 11, 10, 0]
              (interleaved M-RoPE: equal to plain RoPE over the rotary dims for text positions).
  lfm2moe     conv [D, 1, L] -> [D, L]; the final norm is "token_embd_norm"; expert_bias ->
              "exp_probs_b.bias"; per-layer KV head counts 0 on conv layers (that is how the
              loader tells conv from attention layers); sigmoid gating.
  nemotron_h_moe  A_log -> -exp(A_log) as [H, 1]; D as [H, 1]; dt_bias -> "ssm_dt.bias"; the
              gated norm [d_inner] -> [n_groups, d_inner / n_groups]; conv1d [C, 1, K] -> [C, K];
              per-layer feed-forward lengths (the expert width on MoE layers, else 0) and KV head
              counts (on attention layers, else 0): both 0 marks a Mamba2 layer; no RoPE.
  deepseek2   MLA in llama.cpp's split form: kv_b_proj [H·(nope + v), kv_lora] becomes attn_k_b, each
              head's K rows transposed to [H, kv_lora, nope], and attn_v_b [H, v, kv_lora]; one KV
              head of key length kv_lora + rope and value length kv_lora, with the per-head lengths
              as the "_mla" keys; the router and e_score_correction_bias (exp_probs_b.bias) in F32;
              sigmoid gating for deepseek_v3 (softmax for deepseek_v2 without scoring_func); yarn
              rope keys as the config gives them (the log multiplier written as 0.1 x mscale_all_dim,
              which the loader divides back).
make-random writes no tokenizer, so a vocabulary of placeholder tokens (SentencePiece-style
"llama" model) satisfies the loader; llama-bench feeds random token ids, and `--tokens` parity
runs feed ids. This file is for speed and parity runs only: no text is generated from it.

Usage: python3 bench/make_bf16_gguf.py SRC_DIR OUT.gguf LLAMA_CPP_DIR [--f32]
(--f32: every matrix widened to F32, exactly, so that llama.cpp's CPU matmuls do not round the
activations to bf16: the parity check of bench/gguf_parity.sh; needs numpy, and gguf-py from the llama.cpp checkout: LLAMA_CPP_DIR/gguf-py.)
"""
import json
import os
import struct
import sys
import types

import numpy as np

GGUF = None  # gguf-py, imported from the llama.cpp checkout by main()


def open_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    return hdr, mm


class Src:
    """The checkpoint's tensors by HF name: bf16 as uint16 arrays (views of the mmap), or f32."""

    def __init__(self, path):
        self.hdr, self.mm = open_st(path)

    def __contains__(self, name):
        return name in self.hdr

    def shape(self, name):
        return list(self.hdr[name]["shape"])

    def u16(self, name):
        h = self.hdr[name]
        assert h["dtype"] == "BF16", (name, h["dtype"])
        a, b = h["data_offsets"]
        return self.mm[a:b].view("<u2").reshape(h["shape"])

    def f32(self, name):
        u = np.asarray(self.u16(name), dtype=np.uint32) << 16
        return u.view(np.float32)


def bf16_of(x):
    """float32 -> bf16 bits, round to nearest even (for tensors a transform touched)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


class Plan:
    """GGUF tensors in write order: name, numpy-order shape, 'bf16' | 'f32', and a producer that
    returns a list of chunks (uint16 arrays for bf16, float32 arrays for f32) written back to
    back (an expert stack is one chunk per expert)."""

    def __init__(self):
        self.items = []

    def add(self, name, shape, kind, produce):
        self.items.append((name, [int(s) for s in shape], kind, produce))

    def write(self, w, gguf, all_f32=False):
        Q = gguf.GGMLQuantizationType
        if all_f32:  # the parity check's variant: every bf16 matrix widened to f32 (exact)
            def widen(produce):
                return lambda: [(np.asarray(c, dtype=np.uint32) << 16).view(np.float32) for c in produce()]
            self.items = [(n, sh, "f32", widen(p) if k == "bf16" else p) for n, sh, k, p in self.items]
        for name, shape, kind, _ in self.items:
            n = int(np.prod(shape))
            if kind == "f32":
                w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * n)
            else:  # byte shape: the last dim in bytes
                w.add_tensor_info(name, shape[:-1] + [2 * shape[-1]], np.dtype(np.uint8), 2 * n, raw_dtype=Q.BF16)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        fout = w.fout[0]
        for name, shape, kind, produce in self.items:
            want = (4 if kind == "f32" else 2) * int(np.prod(shape))
            w.write_padding(fout, fout.tell())
            got = 0
            for c in produce():
                c = np.ascontiguousarray(c, dtype=np.float32 if kind == "f32" else "<u2")
                fout.write(memoryview(c).cast("B"))
                got += c.nbytes
            assert got == want, (name, got, want)
            w.write_padding(fout, got)
            w.tensors[0].pop(name)
        w.close()


def placeholder_vocab(w, V):
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [1] * (V - 3))         # unknown, control, control, normal
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def raw(s, name):
    return lambda: [s.u16(name)]


def as_f32(s, name, fn=None, shape=None):
    def p():
        x = s.f32(name)
        if fn is not None:
            x = fn(x)
        return [x.reshape(shape) if shape is not None else x]
    return p


def experts(s, fmt, E):
    """One [E, rows, cols] stack from E per-expert matrices, streamed."""
    return lambda: [s.u16(fmt.format(e)) for e in range(E)]


def add_matrix(plan, s, gname, name):
    plan.add(gname, s.shape(name), "bf16", raw(s, name))


def add_f32(plan, s, gname, name, fn=None, shape=None):
    plan.add(gname, shape if shape is not None else s.shape(name), "f32", as_f32(s, name, fn, shape))


def add_experts(plan, s, gname, fmt, E):
    r, c = s.shape(fmt.format(0))
    plan.add(gname, [E, r, c], "bf16", experts(s, fmt, E))


# ---------------------------------------------------------------- qwen3 (dense, issue #15)
def qwen3_attn_keys(cfg, w):
    """The attention, RoPE and norm keys qwen3 and qwen3moe share."""
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])


def qwen3_attn_tensors(plan, s, p, g):
    """Layer p's (HF prefix) attention norm, q/k/v/o and q/k norms as GGUF block g, and its FFN norm."""
    add_f32(plan, s, f"{g}.attn_norm.weight", f"{p}.input_layernorm.weight")
    for proj, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
        add_matrix(plan, s, f"{g}.{gn}.weight", f"{p}.self_attn.{proj}.weight")
    add_f32(plan, s, f"{g}.attn_q_norm.weight", f"{p}.self_attn.q_norm.weight")
    add_f32(plan, s, f"{g}.attn_k_norm.weight", f"{p}.self_attn.k_norm.weight")
    add_f32(plan, s, f"{g}.ffn_norm.weight", f"{p}.post_attention_layernorm.weight")


def qwen3moe_keys(cfg, w, L):
    """The qwen3moe metadata of an L-layer cut (also bench/make_q4_pair.py's Q4_0 twin)."""
    E, I = cfg["num_experts"], cfg["moe_intermediate_size"]
    w.add_block_count(L)
    w.add_context_length(int(cfg.get("max_position_embeddings", 40960)))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(int(cfg.get("intermediate_size", I)))
    w.add_expert_feed_forward_length(I)
    qwen3_attn_keys(cfg, w)
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])


def qwen3(cfg, s, w, plan):
    L, D, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    w.add_block_count(L)
    w.add_context_length(4096)
    w.add_embedding_length(D)
    w.add_feed_forward_length(cfg["intermediate_size"])
    qwen3_attn_keys(cfg, w)
    add_matrix(plan, s, "token_embd.weight", "model.embed_tokens.weight")
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        qwen3_attn_tensors(plan, s, p, g)
        for proj, gn in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            add_matrix(plan, s, f"{g}.{gn}.weight", f"{p}.mlp.{proj}.weight")
    add_f32(plan, s, "output_norm.weight", "model.norm.weight")
    if "lm_head.weight" in s and not cfg.get("tie_word_embeddings"):
        add_matrix(plan, s, "output.weight", "lm_head.weight")


# ---------------------------------------------------------------- qwen3 MoE -> qwen3moe (issue #15)
def qwen3moe(cfg, s, w, plan):
    """Softmax top-k routing (renormalised when norm_topk_prob), q/k RMS norms, NeoX RoPE: the
    same keys bench/make_q4_pair.py writes for its Q4_0 twin; every layer sparse."""
    L, E = cfg["num_hidden_layers"], cfg["num_experts"]
    assert cfg.get("decoder_sparse_step", 1) == 1 and not cfg.get("mlp_only_layers"), "dense layers: not written"
    qwen3moe_keys(cfg, w, L)
    add_matrix(plan, s, "token_embd.weight", "model.embed_tokens.weight")
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        qwen3_attn_tensors(plan, s, p, g)
        add_f32(plan, s, f"{g}.ffn_gate_inp.weight", f"{p}.mlp.gate.weight")
        for proj, gn in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            add_experts(plan, s, f"{g}.{gn}.weight", p + ".mlp.experts.{}." + proj + ".weight", E)
    add_f32(plan, s, "output_norm.weight", "model.norm.weight")
    if "lm_head.weight" in s and not cfg.get("tie_word_embeddings"):
        add_matrix(plan, s, "output.weight", "lm_head.weight")


# ---------------------------------------------------------------- qwen3.5 MoE -> qwen35moe
def qwen35moe(cfg, s, w, plan):
    L, D, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    assert dk == dv, "llama.cpp's qwen35moe takes one head size for DeltaNet keys and values"
    E, hd = cfg["num_experts"], cfg["head_dim"]
    interval = cfg.get("full_attention_interval", 4)
    lt = cfg.get("layer_types") or ["full_attention" if (l + 1) % interval == 0 else "linear_attention" for l in range(L)]
    lt = lt[:L]
    rp = cfg.get("rope_parameters") or {}
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    prf = float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25)))
    sections = list(rp.get("mrope_section") or [11, 11, 10])
    sections = (sections + [0, 0, 0, 0])[:4]

    w.add_block_count(L)
    w.add_context_length(cfg.get("max_position_embeddings", 262144))
    w.add_embedding_length(D)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(int(hd * prf))
    w.add_rope_dimension_sections(sections)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(dv * nv)
    # the loader marks layer l recurrent unless (l + 1) % interval == 0: check that is the pattern
    assert all((t == "full_attention") == ((l + 1) % interval == 0) for l, t in enumerate(lt)), lt
    w.add_full_attention_interval(interval)

    r = nv // nk

    def tile(x, hdim):  # rows grouped by key head [nk, r, hdim, ...] -> tiled [r, nk, hdim, ...]
        sh = x.shape
        return np.ascontiguousarray(x.reshape((nk, r, hdim) + sh[1:]).swapaxes(0, 1)).reshape(sh)

    def p1(x):
        return x + 1.0

    add_matrix(plan, s, "token_embd.weight", "model.embed_tokens.weight")
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        add_f32(plan, s, f"{g}.attn_norm.weight", f"{p}.input_layernorm.weight", p1)
        add_f32(plan, s, f"{g}.post_attention_norm.weight", f"{p}.post_attention_layernorm.weight", p1)
        if lt[l] == "full_attention":
            a = f"{p}.self_attn"
            for proj, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
                add_matrix(plan, s, f"{g}.{gn}.weight", f"{a}.{proj}.weight")
            add_f32(plan, s, f"{g}.attn_q_norm.weight", f"{a}.q_norm.weight", p1)
            add_f32(plan, s, f"{g}.attn_k_norm.weight", f"{a}.k_norm.weight", p1)
        else:
            a = f"{p}.linear_attn"
            qk = 2 * nk * dk

            def qkv(n=f"{a}.in_proj_qkv.weight"):
                x = s.u16(n)
                return [x[:qk], tile(np.asarray(x[qk:]), dv)]

            plan.add(f"{g}.attn_qkv.weight", s.shape(f"{a}.in_proj_qkv.weight"), "bf16", qkv)
            plan.add(f"{g}.attn_gate.weight", s.shape(f"{a}.in_proj_z.weight"), "bf16",
                     lambda n=f"{a}.in_proj_z.weight": [tile(np.asarray(s.u16(n)), dv)])
            plan.add(f"{g}.ssm_beta.weight", s.shape(f"{a}.in_proj_b.weight"), "bf16",
                     lambda n=f"{a}.in_proj_b.weight": [tile(np.asarray(s.u16(n)), 1)])
            plan.add(f"{g}.ssm_alpha.weight", s.shape(f"{a}.in_proj_a.weight"), "bf16",
                     lambda n=f"{a}.in_proj_a.weight": [tile(np.asarray(s.u16(n)), 1)])
            C, _, K = s.shape(f"{a}.conv1d.weight")

            def conv(n=f"{a}.conv1d.weight", C=C, K=K):
                x = s.f32(n).reshape(C, K)
                return [np.concatenate([x[:qk], tile(x[qk:], dv)])]

            plan.add(f"{g}.ssm_conv1d.weight", [C, K], "f32", conv)
            add_f32(plan, s, f"{g}.ssm_a", f"{a}.A_log", lambda x: tile(-np.exp(x), 1))
            add_f32(plan, s, f"{g}.ssm_dt.bias", f"{a}.dt_bias", lambda x: tile(x, 1))
            add_f32(plan, s, f"{g}.ssm_norm.weight", f"{a}.norm.weight")

            def out(n=f"{a}.out_proj.weight"):
                x = np.asarray(s.u16(n))
                return [tile(x.T, dv).T]

            plan.add(f"{g}.ssm_out.weight", s.shape(f"{a}.out_proj.weight"), "bf16", out)
        m = f"{p}.mlp"
        add_f32(plan, s, f"{g}.ffn_gate_inp.weight", f"{m}.gate.weight")
        add_experts(plan, s, f"{g}.ffn_gate_exps.weight", m + ".experts.{}.gate_proj.weight", E)
        add_experts(plan, s, f"{g}.ffn_up_exps.weight", m + ".experts.{}.up_proj.weight", E)
        add_experts(plan, s, f"{g}.ffn_down_exps.weight", m + ".experts.{}.down_proj.weight", E)
        add_f32(plan, s, f"{g}.ffn_gate_inp_shexp.weight", f"{m}.shared_expert_gate.weight",
                shape=[D])
        add_matrix(plan, s, f"{g}.ffn_gate_shexp.weight", f"{m}.shared_expert.gate_proj.weight")
        add_matrix(plan, s, f"{g}.ffn_up_shexp.weight", f"{m}.shared_expert.up_proj.weight")
        add_matrix(plan, s, f"{g}.ffn_down_shexp.weight", f"{m}.shared_expert.down_proj.weight")
    add_f32(plan, s, "output_norm.weight", "model.norm.weight", p1)
    if "lm_head.weight" in s and not cfg.get("tie_word_embeddings"):
        add_matrix(plan, s, "output.weight", "lm_head.weight")


# ---------------------------------------------------------------- LFM2 MoE -> lfm2moe
def lfm2moe(cfg, s, w, plan):
    L, D = cfg["num_hidden_layers"], cfg["hidden_size"]
    lt = cfg["layer_types"][:L]
    E = cfg["num_experts"]
    nd = cfg.get("num_dense_layers", 0)
    rp = cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta", rp.get("rope_theta", 1000000.0)))
    H = cfg["num_attention_heads"]
    w.add_block_count(L)
    w.add_context_length(cfg.get("max_position_embeddings", 128000))
    w.add_embedding_length(D)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv([cfg["num_key_value_heads"] if t == "full_attention" else 0 for t in lt])
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_leading_dense_block_count(nd)
    w.add_expert_gating_func(GGUF.ExpertGatingFuncType.SIGMOID)
    if cfg.get("routed_scaling_factor", 1.0) != 1.0:
        w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_shortconv_l_cache(cfg["conv_L_cache"])
    assert cfg.get("norm_topk_prob", True), "llama.cpp's lfm2moe always renormalises the top-k weights"
    assert not cfg.get("conv_bias"), "conv bias: not written (LFM2-8B-A1B has none)"

    add_matrix(plan, s, "token_embd.weight", "model.embed_tokens.weight")
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        add_f32(plan, s, f"{g}.attn_norm.weight", f"{p}.operator_norm.weight")
        if lt[l] == "full_attention":
            a = f"{p}.self_attn"
            for proj, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("out_proj", "attn_output")):
                add_matrix(plan, s, f"{g}.{gn}.weight", f"{a}.{proj}.weight")
            add_f32(plan, s, f"{g}.attn_q_norm.weight", f"{a}.q_layernorm.weight")
            add_f32(plan, s, f"{g}.attn_k_norm.weight", f"{a}.k_layernorm.weight")
        else:
            c = f"{p}.conv"
            C, _, K = s.shape(f"{c}.conv.weight")
            add_f32(plan, s, f"{g}.shortconv.conv.weight", f"{c}.conv.weight", shape=[C, K])
            add_matrix(plan, s, f"{g}.shortconv.in_proj.weight", f"{c}.in_proj.weight")
            add_matrix(plan, s, f"{g}.shortconv.out_proj.weight", f"{c}.out_proj.weight")
        add_f32(plan, s, f"{g}.ffn_norm.weight", f"{p}.ffn_norm.weight")
        f = f"{p}.feed_forward"
        if l < nd:
            for proj, gn in (("w1", "ffn_gate"), ("w3", "ffn_up"), ("w2", "ffn_down")):
                add_matrix(plan, s, f"{g}.{gn}.weight", f"{f}.{proj}.weight")
        else:
            add_f32(plan, s, f"{g}.ffn_gate_inp.weight", f"{f}.gate.weight")
            add_experts(plan, s, f"{g}.ffn_gate_exps.weight", f + ".experts.{}.w1.weight", E)
            add_experts(plan, s, f"{g}.ffn_up_exps.weight", f + ".experts.{}.w3.weight", E)
            add_experts(plan, s, f"{g}.ffn_down_exps.weight", f + ".experts.{}.w2.weight", E)
            add_f32(plan, s, f"{g}.exp_probs_b.bias", f"{f}.expert_bias")
    add_f32(plan, s, "token_embd_norm.weight", "model.embedding_norm.weight")
    if "lm_head.weight" in s and not (cfg.get("tie_embedding", cfg.get("tie_word_embeddings", True))):
        add_matrix(plan, s, "output.weight", "lm_head.weight")


# ---------------------------------------------------------------- Nemotron-H MoE -> nemotron_h_moe
def nemotron_h_moe(cfg, s, w, plan):
    L, D = cfg["num_hidden_layers"], cfg["hidden_size"]
    pat = cfg.get("hybrid_override_pattern")
    if isinstance(pat, str):
        kinds = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
        lt = [kinds[c] for c in pat[:L]]
    else:
        lt = list(cfg["layers_block_type"])[:L]
    assert "mlp" not in lt, "dense MLP layers in a MoE Nemotron-H: not written"
    assert not cfg.get("moe_latent_size"), "latent MoE: not written (Nemotron-3-Nano has none)"
    E, nh, hdm = cfg["n_routed_experts"], cfg["mamba_num_heads"], cfg["mamba_head_dim"]
    ng, ds = cfg["n_groups"], cfg["ssm_state_size"]
    di = nh * hdm
    hd = cfg.get("head_dim") or cfg.get("attention_head_dim")
    ffe = cfg["moe_intermediate_size"]
    w.add_block_count(L)
    w.add_context_length(cfg.get("max_position_embeddings", 262144))
    w.add_embedding_length(D)
    w.add_feed_forward_length([ffe if t == "moe" else 0 for t in lt])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv([cfg["num_key_value_heads"] if t == "attention" else 0 for t in lt])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_scaling_finetuned(False)
    w.add_layer_norm_rms_eps(cfg.get("layer_norm_epsilon", cfg.get("norm_eps", 1e-5)))
    w.add_ssm_conv_kernel(cfg["conv_kernel"])
    w.add_ssm_state_size(ds)
    w.add_ssm_group_count(ng)
    w.add_ssm_inner_size(di)
    w.add_ssm_time_step_rank(nh)
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(ffe)
    w.add_expert_shared_feed_forward_length(cfg["moe_shared_expert_intermediate_size"])
    w.add_expert_shared_count(cfg.get("n_shared_experts", 1))
    w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", True)))
    w.add_expert_weights_scale(float(cfg.get("routed_scaling_factor", 1.0)))
    assert cfg.get("n_group", 1) == 1 and cfg.get("topk_group", 1) == 1, "grouped routing: not written"

    b = "backbone"
    add_matrix(plan, s, "token_embd.weight", f"{b}.embeddings.weight")
    for l in range(L):
        p, g = f"{b}.layers.{l}", f"blk.{l}"
        x = f"{p}.mixer"
        add_f32(plan, s, f"{g}.attn_norm.weight", f"{p}.norm.weight")
        if lt[l] == "mamba":
            add_matrix(plan, s, f"{g}.ssm_in.weight", f"{x}.in_proj.weight")
            C, _, K = s.shape(f"{x}.conv1d.weight")
            add_f32(plan, s, f"{g}.ssm_conv1d.weight", f"{x}.conv1d.weight", shape=[C, K])
            if f"{x}.conv1d.bias" in s:
                add_f32(plan, s, f"{g}.ssm_conv1d.bias", f"{x}.conv1d.bias")
            add_f32(plan, s, f"{g}.ssm_dt.bias", f"{x}.dt_bias")
            add_f32(plan, s, f"{g}.ssm_a", f"{x}.A_log", lambda v: -np.exp(v), shape=[nh, 1])
            add_f32(plan, s, f"{g}.ssm_d", f"{x}.D", shape=[nh, 1])
            add_f32(plan, s, f"{g}.ssm_norm.weight", f"{x}.norm.weight", shape=[ng, di // ng])
            add_matrix(plan, s, f"{g}.ssm_out.weight", f"{x}.out_proj.weight")
        elif lt[l] == "attention":
            for proj, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
                add_matrix(plan, s, f"{g}.{gn}.weight", f"{x}.{proj}.weight")
        else:
            add_f32(plan, s, f"{g}.ffn_gate_inp.weight", f"{x}.gate.weight")
            add_f32(plan, s, f"{g}.exp_probs_b.bias", f"{x}.gate.e_score_correction_bias")
            add_experts(plan, s, f"{g}.ffn_up_exps.weight", x + ".experts.{}.up_proj.weight", E)
            add_experts(plan, s, f"{g}.ffn_down_exps.weight", x + ".experts.{}.down_proj.weight", E)
            add_matrix(plan, s, f"{g}.ffn_up_shexp.weight", f"{x}.shared_experts.up_proj.weight")
            add_matrix(plan, s, f"{g}.ffn_down_shexp.weight", f"{x}.shared_experts.down_proj.weight")
    add_f32(plan, s, "output_norm.weight", f"{b}.norm_f.weight")
    if "lm_head.weight" in s and not cfg.get("tie_word_embeddings"):
        add_matrix(plan, s, "output.weight", "lm_head.weight")


# ---------------------------------------------------------------- deepseek2 (MLA + MoE, issue #15)
def deepseek2(cfg, s, w, plan):
    L, D, H = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, vh = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvl, ql = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
    E, K, I = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
    dense = int(cfg.get("first_k_dense_replace", 0))
    assert cfg.get("moe_layer_freq", 1) == 1, "moe_layer_freq != 1: not written"
    assert cfg.get("n_group", 1) == 1 and cfg.get("topk_group", 1) == 1, "grouped routing: not written"
    # llama.cpp reads q_lora_rank unless the layer count is a "lite" one (26 / 27)
    assert ql or L in (26, 27), "no q_lora_rank: llama.cpp's deepseek2 loader wants one at this layer count"
    w.add_block_count(L)
    w.add_context_length(int(cfg.get("max_position_embeddings", 4096)))
    w.add_embedding_length(D)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_leading_dense_block_count(dense)
    w.add_head_count(H)
    w.add_head_count_kv(1)
    w.add_key_length(kvl + rope)
    w.add_value_length(kvl)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(vh)
    w.add_rope_dimension_count(rope)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if ql:
        w.add_q_lora_rank(ql)
    w.add_kv_lora_rank(kvl)
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_feed_forward_length(I)
    w.add_expert_shared_count(cfg.get("n_shared_experts", 1))
    w.add_expert_weights_scale(float(cfg.get("routed_scaling_factor", 1.0)))
    w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", False)))
    sigmoid = cfg.get("scoring_func", "sigmoid" if cfg["model_type"] == "deepseek_v3" else "softmax") == "sigmoid"
    G = GGUF.ExpertGatingFuncType
    w.add_expert_gating_func(G.SIGMOID if sigmoid else G.SOFTMAX)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) == "yarn":
        w.add_rope_scaling_type(GGUF.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rs["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rs["original_max_position_embeddings"]))
        w.add_rope_scaling_yarn_log_mul(0.1 * float(rs.get("mscale_all_dim", 1.0)))

    def kv_b(name, part):
        def p():
            a = s.u16(name).reshape(H, nope + vh, kvl)
            return [np.ascontiguousarray(a[:, :nope, :].transpose(0, 2, 1)) if part == "k" else a[:, nope:, :]]
        return p

    add_matrix(plan, s, "token_embd.weight", "model.embed_tokens.weight")
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        a = f"{p}.self_attn"
        add_f32(plan, s, f"{g}.attn_norm.weight", f"{p}.input_layernorm.weight")
        if ql:
            add_matrix(plan, s, f"{g}.attn_q_a.weight", f"{a}.q_a_proj.weight")
            add_f32(plan, s, f"{g}.attn_q_a_norm.weight", f"{a}.q_a_layernorm.weight")
            add_matrix(plan, s, f"{g}.attn_q_b.weight", f"{a}.q_b_proj.weight")
        else:
            add_matrix(plan, s, f"{g}.attn_q.weight", f"{a}.q_proj.weight")
        add_matrix(plan, s, f"{g}.attn_kv_a_mqa.weight", f"{a}.kv_a_proj_with_mqa.weight")
        add_f32(plan, s, f"{g}.attn_kv_a_norm.weight", f"{a}.kv_a_layernorm.weight")
        plan.add(f"{g}.attn_k_b.weight", [H, kvl, nope], "bf16", kv_b(f"{a}.kv_b_proj.weight", "k"))
        plan.add(f"{g}.attn_v_b.weight", [H, vh, kvl], "bf16", kv_b(f"{a}.kv_b_proj.weight", "v"))
        add_matrix(plan, s, f"{g}.attn_output.weight", f"{a}.o_proj.weight")
        add_f32(plan, s, f"{g}.ffn_norm.weight", f"{p}.post_attention_layernorm.weight")
        m = f"{p}.mlp"
        if l < dense:
            for proj, gn in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                add_matrix(plan, s, f"{g}.{gn}.weight", f"{m}.{proj}.weight")
            continue
        add_f32(plan, s, f"{g}.ffn_gate_inp.weight", f"{m}.gate.weight")
        if f"{m}.gate.e_score_correction_bias" in s:
            add_f32(plan, s, f"{g}.exp_probs_b.bias", f"{m}.gate.e_score_correction_bias")
        for proj, gn in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            add_experts(plan, s, f"{g}.{gn}.weight", m + ".experts.{}." + proj + ".weight", E)
        for proj, gn in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
            add_matrix(plan, s, f"{g}.{gn}.weight", f"{m}.shared_experts.{proj}.weight")
    add_f32(plan, s, "output_norm.weight", "model.norm.weight")
    if "lm_head.weight" in s and not cfg.get("tie_word_embeddings"):
        add_matrix(plan, s, "output.weight", "lm_head.weight")


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[4:] not in ([], ["--f32"]):
        sys.exit(__doc__)
    src, out, lcpp = sys.argv[1], sys.argv[2], sys.argv[3]
    all_f32 = sys.argv[4:] == ["--f32"]
    # gguf-py imports these at the top for what is not used here; a bare python (the device's) may lack them
    sys.modules.setdefault("sentencepiece", types.SimpleNamespace(SentencePieceProcessor=None))
    try:
        import yaml  # noqa: F401
    except ImportError:
        sys.modules["yaml"] = types.SimpleNamespace()
    sys.path.insert(0, os.path.join(lcpp, "gguf-py"))
    import gguf
    global GGUF
    GGUF = gguf
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if isinstance(cfg.get("text_config"), dict):            # hub VL wrapper: the text model's keys
        cfg = {**cfg, **cfg["text_config"]}
    mt = cfg["model_type"]
    if mt == "qwen3":
        arch, fill = "qwen3", qwen3
    elif mt == "qwen3_moe":
        arch, fill = "qwen3moe", qwen3moe
    elif mt in ("qwen3_5_moe", "qwen3_5_moe_text"):
        arch, fill = "qwen35moe", qwen35moe
    elif mt == "lfm2_moe":
        arch, fill = "lfm2moe", lfm2moe
    elif mt == "nemotron_h" and cfg.get("n_routed_experts"):
        arch, fill = "nemotron_h_moe", nemotron_h_moe
    elif mt in ("deepseek_v3", "deepseek_v2"):
        arch, fill = "deepseek2", deepseek2
    else:
        sys.exit(f"make_bf16_gguf: model_type {mt!r}: no llama.cpp mapping written here")
    s = Src(os.path.join(src, "model.safetensors"))
    w = gguf.GGUFWriter(out, arch)
    w.add_file_type(0 if all_f32 else 32)                # LLAMA_FTYPE_ALL_F32 / MOSTLY_BF16
    placeholder_vocab(w, cfg["vocab_size"])
    plan = Plan()
    fill(cfg, s, w, plan)
    plan.write(w, gguf, all_f32)
    print(out, "written", flush=True)


if __name__ == "__main__":
    main()
