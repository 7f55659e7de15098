#!/usr/bin/env python3
"""The transformers side of bench/run_transformers_compare.sh: prefill and decode speed of a
checkpoint folder on the CPU, measured the way `cinfer bench` measures it (one prefill of
--prompt-len random tokens, then --gen greedy steps through the KV cache, one token each).

    python3 bench/transformers_cpu.py DIR --threads 16 --prompt-len 128 --gen 32 [--dtype float32]
    python3 bench/transformers_cpu.py DIR --logits-of 1,2,3 --out F   # f32 logits [T, vocab] for parity

Prints one line: "transformers prefill P tok/s decode D tok/s (dtype, threads)".
"""
import argparse
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--logits-of", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype).eval()
    if a.logits_of:
        ids = torch.tensor([[int(x) for x in a.logits_of.split(",")]])
        with torch.inference_mode():
            lg = model(ids).logits[0].float().numpy()
        lg.tofile(a.out)
        return
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(1)

    def run(P, G):
        ids = torch.randint(0, V, (1, P), generator=g)
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            t1 = time.perf_counter()
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            t2 = time.perf_counter()
            for _ in range(G):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1:].argmax(-1)
            t3 = time.perf_counter()
        return P / (t1 - t0), G / (t3 - t2)

    run(8, 2)  # warm-up
    for _ in range(a.rounds):
        pf, dc = run(a.prompt_len, a.gen)
        print(f"transformers prefill {pf:.1f} tok/s decode {dc:.2f} tok/s ({a.dtype}, {torch.get_num_threads()} threads)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
