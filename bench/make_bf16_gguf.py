#!/usr/bin/env python3
"""The same random dense weights for llama.cpp: a bf16 qwen3 checkpoint from `cinfer make-random`
(HF names, one safetensors file) written as a GGUF of llama.cpp's "qwen3" architecture, for the
CPU side-by-side in bench/RESULTS.md (issue #15, bench/run_llamacpp_dense.sh).

Every matrix keeps its bf16 bytes unchanged (GGML type BF16); the norms (including the per-head
q/k norms) are F32, as llama.cpp's converter writes them. The embedding is tied (no output.weight),
as in the checkpoint. make-random writes no tokenizer, so a vocabulary of placeholder tokens
(SentencePiece-style "llama" model) satisfies the loader; llama-bench feeds random token ids.
This file is for speed only: no text is generated from it.

Usage: python3 bench/make_bf16_gguf.py SRC_DIR OUT.gguf LLAMA_CPP_DIR
(needs numpy, and gguf-py from the llama.cpp checkout.)
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


def main():
    src, out, lcpp = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.modules.setdefault("sentencepiece", types.SimpleNamespace(SentencePieceProcessor=None))
    sys.path.insert(0, os.path.join(lcpp, "gguf-py"))
    import gguf
    Q = gguf.GGMLQuantizationType
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "qwen3", "a dense qwen3 checkpoint"
    hdr, mm = open_st(os.path.join(src, "model.safetensors"))
    L, D, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]

    w = gguf.GGUFWriter(out, "qwen3")
    w.add_block_count(L)
    w.add_context_length(4096)
    w.add_embedding_length(D)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(32)                                  # LLAMA_FTYPE_MOSTLY_BF16
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [1] * (V - 3))         # unknown, control, control, normal
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    plan = []  # (gguf name, source name, kind)

    def raw(name):
        h = hdr[name]
        assert h["dtype"] == "BF16", (name, h["dtype"])
        a, b = h["data_offsets"]
        return mm[a:b], h["shape"]

    plan.append(("token_embd.weight", "model.embed_tokens.weight", "bf16"))
    for l in range(L):
        p, g = f"model.layers.{l}", f"blk.{l}"
        plan.append((f"{g}.attn_norm.weight", f"{p}.input_layernorm.weight", "f32"))
        for proj, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            plan.append((f"{g}.{gn}.weight", f"{p}.self_attn.{proj}.weight", "bf16"))
        plan.append((f"{g}.attn_q_norm.weight", f"{p}.self_attn.q_norm.weight", "f32"))
        plan.append((f"{g}.attn_k_norm.weight", f"{p}.self_attn.k_norm.weight", "f32"))
        plan.append((f"{g}.ffn_norm.weight", f"{p}.post_attention_layernorm.weight", "f32"))
        for proj, gn in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            plan.append((f"{g}.{gn}.weight", f"{p}.mlp.{proj}.weight", "bf16"))
    plan.append(("output_norm.weight", "model.norm.weight", "f32"))
    if "lm_head.weight" in hdr and not cfg.get("tie_word_embeddings"):
        plan.append(("output.weight", "lm_head.weight", "bf16"))

    def produce(src_name, kind):
        b, shape = raw(src_name)
        if kind == "bf16":
            return np.asarray(b, dtype=np.uint8).reshape(shape[0], -1)
        u = np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16
        return np.ascontiguousarray(u.view(np.float32).reshape(shape))

    for name, s, kind in plan:
        shape = hdr[s]["shape"]
        if kind == "f32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:  # byte shape [rows, 2 * cols]
            w.add_tensor_info(name, [shape[0], 2 * shape[1]], np.dtype(np.uint8), 2 * int(np.prod(shape)),
                              raw_dtype=Q.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, s, kind in plan:
        w.write_tensor_data(produce(s, kind))
    w.close()
    print(out, "written", flush=True)


if __name__ == "__main__":
    main()
