#!/usr/bin/env python3
"""Builds the demo model's training corpus from Debian packages (run here, stdlib only).

Sources (installed or unpacked with `apt-get download` + `dpkg -x`):
  fortunes, fortunes-min  /usr/share/games/fortunes/*  (fortune-mod data; BSD licence)
  wordnet-base            /usr/share/wordnet/data.*    (WordNet 3.0 glosses and example
                                                        sentences; WordNet licence)
Each fortune and each gloss is one document; documents are normalised (whitespace runs
collapsed inside lines), deduplicated, shuffled with a fixed seed and split into a training
file and a held-out file (every 50th document). Usage:
  python3 make_corpus.py ROOT OUT_DIR     (ROOT: where the packages are unpacked, e.g. /)
"""
import glob
import os
import random
import re
import sys


def fortunes(root):
    docs = []
    for path in sorted(glob.glob(os.path.join(root, "usr/share/games/fortunes/*"))):
        if path.endswith(".dat") or os.path.isdir(path) or os.path.islink(path) or "/off/" in path:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for doc in f.read().split("\n%\n"):
                doc = "\n".join(re.sub(r"[ \t]+", " ", l).rstrip() for l in doc.strip("\n%").splitlines())
                if 20 <= len(doc) <= 2000:
                    docs.append(doc.strip())
    return docs


def wordnet(root):
    docs = []
    for path in sorted(glob.glob(os.path.join(root, "usr/share/wordnet/data.*"))):
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                words = head.split()
                lemma = words[4].replace("_", " ") if len(words) > 4 else ""
                gloss = gloss.strip()
                parts = [p.strip() for p in gloss.split(";") if p.strip()]
                defs = [p for p in parts if not p.startswith('"')]
                examples = [p.strip('"') for p in parts if p.startswith('"')]
                text = f"{lemma}: {'; '.join(defs)}." if defs else ""
                if examples:
                    text += " " + " ".join(e[0].upper() + e[1:] + ("" if e.endswith((".", "!", "?")) else ".") for e in examples if e)
                if len(text) >= 20:
                    docs.append(text)
    return docs


def main():
    root, out = sys.argv[1], sys.argv[2]
    docs = fortunes(root) + wordnet(root)
    seen, uniq = set(), []
    for d in docs:
        if d not in seen:
            seen.add(d)
            uniq.append(d)
    random.Random(20261129).shuffle(uniq)
    held = [d for i, d in enumerate(uniq) if i % 50 == 0]
    train = [d for i, d in enumerate(uniq) if i % 50 != 0]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "train.txt"), "w") as f:
        f.write("\n\n".join(train) + "\n")
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        f.write("\n\n".join(held) + "\n")
    print(f"{len(docs)} documents, {len(uniq)} unique; train {sum(map(len, train))} chars, held-out {sum(map(len, held))} chars")


if __name__ == "__main__":
    main()
