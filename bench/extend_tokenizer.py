#!/usr/bin/env python3
"""extend_tokenizer.py SRC_DIR DST_DIR VOCAB: copies SRC_DIR's tokenizer.json / tokenizer_config.json
(a byte-level BPE, e.g. models/demo's 4096 ids) into DST_DIR with placeholder tokens "t<id>" added for
ids up to VOCAB - 1, so that every id a random checkpoint of that vocabulary generates has a text.
For the serving benches (bench/serve_cuda.sh): a server streams a chunk when the text grows, so with
ids that decode to nothing the first chunk (time to first token) would wait for the first id below
the tokenizer's size."""
import json, shutil, sys

src, dst, V = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = json.load(open(f"{src}/tokenizer.json"))
vocab = t["model"]["vocab"]
n = max(vocab.values()) + 1
for i in range(n, V):
    vocab[f"t{i}"] = i
json.dump(t, open(f"{dst}/tokenizer.json", "w"))
shutil.copy(f"{src}/tokenizer_config.json", f"{dst}/tokenizer_config.json")
print(f"tokenizer: {n} ids -> {max(n, V)}")
