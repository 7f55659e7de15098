#!/usr/bin/env python3
"""Parity at real dimensions, on the GPU box: transformers (float64, eager) against
`cinfer logits` on a checkpoint `cinfer make-random` wrote from a real model's config (fewer
layers and experts so that it loads quickly). The tiny fixtures of tools/oracle/ pin the
math; this checks that nothing depends on sizes they do not reach (head_dim 512, 64 heads,
index_topk 512 over > 2048 tokens, o_groups 8, hc_mult 4, real vocabularies).

    python3 check_real_dims.py MODEL_DIR CINFER_LOGITS.f32 TOKENS_FILE [--rows 0:16,-48:]

MODEL_DIR holds config.json + model.safetensors; CINFER_LOGITS.f32 is what
`cinfer logits --model MODEL_DIR --tokens ... --out F` wrote ([T, vocab] float32); TOKENS_FILE
has the comma-separated ids. Prints max|diff| over the chosen rows, the logit scale, and
how many rows agree on the argmax.
"""
import argparse
import os
import re
import shutil
import tempfile
import time

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def fused_copy(model_dir):
    """make-random writes per-expert projections (...experts.E.gate_proj.weight); transformers
    5 keeps experts fused (experts.gate_up_proj [E, 2I, H] with gate first, experts.down_proj
    [E, H, I]). A copy of the folder with the experts fused, or model_dir when none are split."""
    sd = load_file(os.path.join(model_dir, "model.safetensors"))
    pat = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
    groups = {}
    for k in list(sd):
        m = pat.match(k)
        if m:
            groups.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = sd.pop(k)
    if not groups:
        return model_dir
    for pre, ex in groups.items():
        E = max(ex) + 1
        if "gate_proj" in ex[0]:
            sd[pre + ".gate_up_proj"] = torch.stack([torch.cat([ex[e]["gate_proj"], ex[e]["up_proj"]], 0) for e in range(E)])
        else:                                   # no gate (Nemotron-H's relu2 experts)
            sd[pre + ".up_proj"] = torch.stack([ex[e]["up_proj"] for e in range(E)])
        sd[pre + ".down_proj"] = torch.stack([ex[e]["down_proj"] for e in range(E)])
    out = tempfile.mkdtemp()
    shutil.copy(os.path.join(model_dir, "config.json"), out)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    print(f"fused the experts of {len(groups)} layers", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("cinfer_logits")
    ap.add_argument("tokens")
    ap.add_argument("--rows", default="0:16,-48:")
    a = ap.parse_args()
    toks = [int(x) for x in open(a.tokens).read().strip().split(",")]
    T = len(toks)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(fused_copy(a.model), dtype=torch.float64, attn_implementation="eager",
                                                 experts_implementation="eager").to("cuda").eval()
    print(f"loaded in {time.time() - t0:.1f} s", flush=True)
    with torch.no_grad():
        ref = model(torch.tensor([toks], device="cuda")).logits[0].cpu().numpy()
    V = ref.shape[1]
    ours = np.memmap(a.cinfer_logits, dtype=np.float32, mode="r").reshape(T, -1)[:, :V]
    rows = []
    for part in a.rows.split(","):
        lo, hi = part.split(":")
        rows += list(range(T))[slice(int(lo) if lo else None, int(hi) if hi else None)]
    d = np.abs(ours[rows].astype(np.float64) - ref[rows])
    am = (ours[rows].argmax(1) == ref[rows].argmax(1)).sum()
    print(f"T {T}, vocab {V}, rows {len(rows)}: max|diff| {d.max():.3g} (row {rows[int(d.max(1).argmax())]}), "
          f"mean {d.mean():.3g}, logit scale {np.abs(ref[rows]).max():.3g}, argmax equal {am}/{len(rows)}")


if __name__ == "__main__":
    main()
