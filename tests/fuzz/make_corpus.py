#!/usr/bin/env python3
"""Writes the seed corpora for tests/fuzz (run from anywhere; rewrites the files).

corpus/safetensors/: small safetensors file images (8-byte little-endian header length,
JSON header, data), valid ones of several dtypes and a few broken ones, each < 4 KiB.
corpus/config/: config.json texts in the dialects checkpoints ship (Python's bare
Infinity / NaN included). corpus/model/: fuzz_model's model folders, shrunk from
tests/fixtures (see the comment above shrink_model). Standard library only."""
import json, os, re, struct

here = os.path.dirname(os.path.abspath(__file__))


def st(header, data=b"", hlen=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def t(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


SAFETENSORS = {
    "valid_f32.safetensors": st({"w": t("F32", [2, 2], 0, 16)}, struct.pack("<4f", 1, -2, 0.5, 3)),
    "valid_mixed.safetensors": st({
        "__metadata__": {"format": "pt"},
        "model.embed_tokens.weight": t("BF16", [4, 2], 0, 16),
        "model.layers.0.mlp.gate_proj.weight": t("F8_E4M3", [2, 4], 16, 24),
        "model.layers.0.mlp.gate_proj.weight_scale_inv": t("F32", [1, 1], 24, 28),
        "mask": t("BOOL", [3], 28, 31),
        "ids": t("I64", [1], 32, 40),
        "empty": t("F16", [0, 4], 40, 40),
        "scale": t("F8_E8M0", [], 40, 41),
    }, bytes(range(41))),
    "valid_empty.safetensors": st({}),
    "valid_meta_only.safetensors": st({"__metadata__": {"format": "mlx"}}),
    "valid_mlx_quant.safetensors": st({
        "layers.0.q_proj.weight": t("U32", [2, 1], 0, 8),
        "layers.0.q_proj.scales": t("F16", [2, 1], 8, 12),
        "layers.0.q_proj.biases": t("F16", [2, 1], 12, 16),
    }, bytes(16)),
    "bad_overlap.safetensors": st({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, bytes(12)),
    "bad_mismatch.safetensors": st({"a": t("BF16", [4, 4], 0, 30)}, bytes(30)),
    "bad_overflow.safetensors": st({"a": t("F32", [1 << 40, 1 << 40], 0, 0)}),
    "bad_not_object.safetensors": st(b"[1, 2, 3]"),
    "bad_truncated.safetensors": st(b'{"a": {"dtype": "F32", "sha', hlen=40),
    "bad_dtype.safetensors": st({"a": t("F4", [1], 0, 1)}, b"x"),
}

LLAMA = """{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
  "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 2048,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 1,
  "eos_token_id": [2, 3], "attention_bias": false, "head_dim": 16
}
"""

QWEN3 = """{
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 64, "intermediate_size": 192, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-06, "max_position_embeddings": 40960,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
  "tie_word_embeddings": false, "dtype": "bfloat16", "sliding_window": null,
  "use_sliding_window": false, "layer_types": ["full_attention", "full_attention"]
}
"""

NEMOTRON = """{
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
  "hidden_size": 64, "num_hidden_layers": 4, "hybrid_override_pattern": "M*M-",
  "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2,
  "conv_kernel": 4, "time_step_limit": [0.0, Infinity], "time_step_min": 0.001,
  "time_step_max": 0.1, "time_step_floor": 0.0001, "rescale_prenorm_residual": true,
  "text_config": {"hidden_size": 64, "rope_theta": -Infinity}
}
"""

NAN = """{"model_type": "qwen3_moe", "hidden_size": 32, "router_aux_loss_coef": NaN,
 "rope_theta": {"__float__": "Infinity"}, "note": "NaN in a string stays", "x": [NaN, -Infinity, 1e308],
 "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 4096.0, "time_step_limit": [0.0, NaN]}}
"""

CONFIG = {"llama.json": LLAMA, "qwen3_rope_parameters.json": QWEN3, "nemotron_h_inf.json": NEMOTRON,
          "nan.json": NAN, "broken.json": '{"hidden_size": 64, "rope_theta": Infinit'}

for sub, files in (("safetensors", SAFETENSORS), ("config", CONFIG)):
    d = os.path.join(here, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    for name, body in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(body if isinstance(body, bytes) else body.encode())
        assert os.path.getsize(os.path.join(d, name)) < 4096, name


# corpus/model/: one model folder per fixture under tests/fixtures (fuzz_model's framing:
# 4-byte little-endian config length, config.json, then model.safetensors). Shards are
# merged into one file. To keep inputs small the vocabulary is cut to VOCAB rows (every
# tensor whose first dim is the vocab is sliced, token ids in the config clamped), models
# over BUDGET keep their first LAYERS layers (num_hidden_layers, per-layer lists and
# patterns cut to match, the other layers' tensors dropped), and an entry still over BUDGET
# has its F32 matrices stored as BF16 (the upper half of each float). Tensors keep their
# names and shapes, so each entry still loads (fuzz_model with FUZZ_MODEL_VERBOSE=1 says).
# Fixtures still big after that are left out unless their model_type has no other entry.
VOCAB, BUDGET, LAYERS = 16, 96 * 1024, 2
BF16_OK = ("F32",)


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}


def write_st(tensors):
    header, data = {}, b""
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        header[k] = t(dt, shape, len(data), len(data) + len(raw))
        data += raw
    return st(json.dumps(header, separators=(",", ":")).encode(), data)


def shrink_model(fixture):
    cfg = json.load(open(os.path.join(fixture, "config.json")))
    text = cfg.get("text_config", cfg)
    vocab = text["vocab_size"]
    for c in (cfg, text):
        if "vocab_size" in c:
            c["vocab_size"] = VOCAB
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            v = c.get(key)
            if isinstance(v, int):
                c[key] = min(v, VOCAB - 1)
            elif isinstance(v, list):
                c[key] = [min(x, VOCAB - 1) for x in v]
    tensors = {}
    for f in sorted(os.listdir(fixture)):
        if f.endswith(".safetensors"):
            tensors.update(read_st(os.path.join(fixture, f)))
    for k, (dt, shape, raw) in list(tensors.items()):
        if shape and shape[0] == vocab:
            row = len(raw) // vocab
            tensors[k] = (dt, [VOCAB] + shape[1:], raw[:row * VOCAB])

    def frame():
        c = json.dumps(cfg, indent=1).encode()
        return struct.pack("<I", len(c)) + c + write_st(tensors)
    body = frame()
    layers = text.get("num_hidden_layers")
    if len(body) > BUDGET and isinstance(layers, int) and layers > LAYERS:
        for c in (cfg, text):
            for key, v in list(c.items()):
                if key == "num_hidden_layers":
                    c[key] = LAYERS
                elif (isinstance(v, list) or "pattern" in key) and len(v) == layers:
                    c[key] = v[:LAYERS]
        for k in list(tensors):
            m = re.search(r"layers\.(\d+)\.", k)
            if m and int(m.group(1)) >= LAYERS:
                del tensors[k]
        body = frame()
    if len(body) > BUDGET:
        for k, (dt, shape, raw) in list(tensors.items()):
            if dt in BF16_OK and len(shape) >= 2 and not k.endswith((".scales", ".biases")) and "scale" not in k:
                tensors[k] = ("BF16", shape, b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4)))
        body = frame()
    return body


fixtures = os.path.join(here, "..", "fixtures")
d = os.path.join(here, "corpus", "model")
os.makedirs(d, exist_ok=True)
for f in os.listdir(d):
    os.remove(os.path.join(d, f))
entries = {}  # name -> (model_type, body)
for name in sorted(os.listdir(fixtures)):
    if os.path.exists(os.path.join(fixtures, name, "config.json")):
        body = shrink_model(os.path.join(fixtures, name))
        c = json.loads(body[4:4 + struct.unpack("<I", body[:4])[0]])
        entries[name] = (c.get("text_config", c).get("model_type"), body)
# Entries up to KEEP bytes, plus the smallest one of each model_type none of those covers
# (the corpus stays a few MB; bigger inputs also mutate mostly weight bytes).
KEEP = 160 * 1024
keep = {n for n, (_, b) in entries.items() if len(b) <= KEEP}
for mt in sorted({mt for mt, _ in entries.values()} - {entries[n][0] for n in keep}):
    keep.add(min((n for n in entries if entries[n][0] == mt), key=lambda n: len(entries[n][1])))
for name in sorted(keep):
    with open(os.path.join(d, name), "wb") as f:
        f.write(entries[name][1])
