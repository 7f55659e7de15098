#!/usr/bin/env python3
"""Rewrites the DeltaNet decay parameters of a random checkpoint (cinfer make-random) in place
with the gated-DeltaNet / Mamba2 initialisation (FLA): A = exp(A_log) ~ U(1, 16) and
dt_bias = softplus^-1(dt), dt log-uniform in [0.001, 0.1]; so the per-token log decay
g = -A * softplus(a + dt_bias) is mostly in [-1.6, 0) as in trained models, instead of the
~-3 per token that make-random's generic 1 +- 0.1 / 0 values give (under which every
head forgets within a few tokens). Standard library only.

Usage: python3 bench/set_deltanet_decay.py MODEL_DIR [SEED]
"""
import json
import math
import random
import struct
import sys


def main():
    path = sys.argv[1] + "/model.safetensors"
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        done = 0
        for name, t in hdr.items():
            if name == "__metadata__" or not (name.endswith("linear_attn.A_log") or name.endswith("linear_attn.dt_bias")):
                continue
            count = t["shape"][0]
            if name.endswith("A_log"):
                vals = [math.log(rng.uniform(1.0, 16.0)) for _ in range(count)]
            else:
                dts = [math.exp(rng.uniform(math.log(1e-3), math.log(1e-1))) for _ in range(count)]
                vals = [dt + math.log(-math.expm1(-dt)) for dt in dts]
            if t["dtype"] == "F32":
                blob = struct.pack(f"<{count}f", *vals)
            elif t["dtype"] == "BF16":
                blob = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0] + 0x8000)[2:]
                                for v in vals)
            else:
                raise SystemExit(f"{name}: dtype {t['dtype']} not handled")
            f.seek(base + t["data_offsets"][0])
            f.write(blob)
            done += 1
    print(f"{path}: rewrote {done} tensors")


if __name__ == "__main__":
    main()
