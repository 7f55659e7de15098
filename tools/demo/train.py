#!/usr/bin/env python3
"""Trains cinfer's embedded demo model on the GPU box (one device run), reproducibly.

  python3 train.py CORPUS_DIR OUT_DIR [--seconds S]

CORPUS_DIR holds train.txt and heldout.txt from make_corpus.py. Steps:
 1. A byte-level BPE tokenizer (Hugging Face `tokenizers`, vocab 4096, GPT-2 style
    pre-tokenizer regex, BOS added by the post-processor) trained on train.txt, saved with a
    small chat template as tokenizer.json + tokenizer_config.json.
 2. A deepseek_v3-architecture model (MLA with q_lora, sigmoid grouped-router MoE with a
    shared expert, one dense first layer; about 4.5 M parameters) trained from scratch on
    <bos> doc <eos> sequences packed into 256-token rows: AdamW, lr 3e-3 with warm-up and
    cosine decay, batch 64, bf16 autocast, seed 1234, for at most --seconds (default 240)
    or 4000 steps.
 3. Saved in bf16 (model.safetensors + config.json), then the reference for cinfer's tests
    computed in float64 on the CPU from exactly the saved weights: the perplexity of the
    first 2048 held-out tokens (8 independent windows of 256; the first token of a window is
    not scored) and greedy continuations (32 tokens) of three prompts -> ref.json.
"""
import json
import math
import os
import random
import sys
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

SEED = 1234
VOCAB = 4096
SEQ = 256
BATCH = 64
PROMPTS = ["The meaning of life is", "water: ", "A friend in need"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96,
              kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
              n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
              routed_scaling_factor=1.0, norm_topk_prob=True, first_k_dense_replace=1,
              max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
              rope_interleave=True, rope_parameters=dict(rope_type="default", rope_theta=10000.0))


def train_tokenizer(corpus, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([os.path.join(corpus, "train.txt")], trainer)
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B",
                                                       special_tokens=[("<|bos|>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|pad|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 240.0
    random.seed(SEED)
    torch.manual_seed(SEED)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    tk = train_tokenizer(corpus, out)
    bos, eos = tk.bos_token_id, tk.eos_token_id
    with open(os.path.join(corpus, "train.txt")) as f:
        docs = f.read().split("\n\n")
    ids = []
    for enc in tk(docs, add_special_tokens=False)["input_ids"]:
        ids += [bos] + enc + [eos]
    data = torch.tensor(ids, dtype=torch.long)
    n_rows = len(data) // SEQ
    data = data[: n_rows * SEQ].view(n_rows, SEQ)
    print(f"tokenizer {time.time() - t0:.1f}s; {len(ids)} training tokens, {n_rows} rows", flush=True)

    cfg = AutoConfig.for_model("deepseek_v3", bos_token_id=bos, eos_token_id=eos, pad_token_id=tk.pad_token_id,
                               **CONFIG)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, experts_implementation="eager").cuda()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    max_steps, warm = 4000, 100
    g = torch.Generator().manual_seed(SEED)
    data = data.cuda()
    step, t_start, losses = 0, time.time(), []
    est_total = max_steps
    model.train()
    while step < max_steps:
        elapsed = time.time() - t_start
        if elapsed > seconds:
            break
        if step == 50:  # calibrate the schedule to the time budget
            est_total = min(max_steps, int(seconds / (elapsed / 50)))
        lr = 3e-3 * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(est_total, 1)))))
        for pg in opt.param_groups:
            pg["lr"] = lr
        idx = torch.randint(0, n_rows, (BATCH,), generator=g).cuda()
        batch = data[idx]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 200 == 0:
            print(f"step {step} loss {sum(losses[-50:]) / len(losses[-50:]):.3f} lr {lr:.2e} t {elapsed:.0f}s", flush=True)
        step += 1
    print(f"trained {step} steps in {time.time() - t_start:.0f}s, final loss {sum(losses[-50:]) / 50:.3f}", flush=True)

    model = model.to(torch.bfloat16).cpu()
    model.save_pretrained(out)
    gc = os.path.join(out, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)

    # Reference in float64 from exactly the saved bf16 weights.
    ref = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager",
                                               experts_implementation="eager").eval()
    with open(os.path.join(corpus, "heldout.txt")) as f:
        held = f.read()
    held_ids = tk(held, add_special_tokens=False)["input_ids"][:2048]
    # the exact text those tokens decode to, so cinfer can re-tokenize it (drop a few tokens
    # at the end if the cut splits a character)
    while True:
        held_text = tk.decode(held_ids)
        if tk(held_text, add_special_tokens=False)["input_ids"] == held_ids:
            break
        held_ids = held_ids[:-1]
    nll, cnt = 0.0, 0
    with torch.no_grad():
        for w in range(0, len(held_ids), SEQ):
            win = torch.tensor(held_ids[w:w + SEQ])[None]
            logits = ref(win).logits[0]
            lp = torch.log_softmax(logits[:-1], dim=-1)
            nll -= lp.gather(1, win[0, 1:, None]).sum().item()
            cnt += win.shape[1] - 1
    ppl = math.exp(nll / cnt)
    greedy = []
    with torch.no_grad():
        for p in PROMPTS:
            pid = tk(p)["input_ids"]
            res = ref.generate(torch.tensor(pid)[None], max_new_tokens=32, do_sample=False, eos_token_id=eos,
                               pad_token_id=tk.pad_token_id)
            gen = res[0, len(pid):].tolist()
            greedy.append(dict(prompt=p, prompt_ids=pid, ids=gen, text=tk.decode(gen)))
            print(f"{p!r} -> {tk.decode(gen)!r}", flush=True)
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        f.write(held_text)
    meta = dict(heldout_tokens=len(held_ids), window=SEQ, scored_tokens=cnt, perplexity=ppl, greedy=greedy,
                params=n_params, steps=step, final_loss=sum(losses[-50:]) / 50, seed=SEED,
                transformers=__import__("transformers").__version__, torch=torch.__version__)
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"held-out perplexity {ppl:.4f} over {cnt} tokens; files {sorted(os.listdir(out))}", flush=True)


if __name__ == "__main__":
    main()
