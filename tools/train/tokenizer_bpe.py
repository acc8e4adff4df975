"""Byte-level BPE tokenizer of the bundled model family: train, write tokenizer.json, encode.

What it is for
  build_family.py trains it on the corpus's train split and encodes both splits with it:
      /usr/bin/python3 tools/train/tokenizer_bpe.py --corpus build/family/corpus --out DIR
  writes DIR/tokenizer.json, DIR/tokenizer_config.json (standard Hugging Face files; our C++
  tokenizer and HF `tokenizers` load them and must encode identically, see check_tokenizer.py).

  Layout (Qwen2/GPT-2 style byte-level BPE):
    id 0            <|endoftext|>  special; BOS (prepended by the TemplateProcessing post-processor
                                   when special tokens are added), EOS and pad
    ids 1..256      the 256 byte symbols (GPT-2's byte -> printable character map), in byte order
    ids 257..4095   merges in training order (VOCAB_SIZE = 4096 in all)
  Pre-tokenizer: Split on PATTERN (Llama-3's regex: letters with one leading non-letter, digit runs
  of 1-3, punctuation runs, newlines, whitespace — except that punctuation does not swallow the
  newlines after it) then ByteLevel without prefix space. With Llama-3's `[^\s\p{L}\p{N}]+[\r\n]*`
  "):\n" is one token, so a completion prompt ending in ":" (`def f(n):`) stops at a token
  boundary the model never saw in training, and a model this small then derails.
  Why 4096: the target has hidden size 256, so each 1024 vocabulary entries cost 262k parameters
  (3.5% of the target) in the tied embedding; at 4096 the embedding is 1/7 of the model, the corpus
  (8.6 MB) still gives every token hundreds of occurrences, and a token averages ~3.3 bytes of
  code. Doubling the vocabulary would buy ~10% fewer tokens for 1M more undertrained parameters.

  Training is classic BPE on word counts: the most frequent adjacent pair is merged; ties go to the
  lexicographically smallest pair, so the result depends only on the corpus. Encoding applies the
  merges by rank (lowest first, leftmost on ties), as Hugging Face's BPE model does.

What it must not do
  Depend on anything but the standard library; iterate a set or dict whose order could change
  the result; silently differ from what tokenizer.json says (check_tokenizer.py compares the
  encoder here, our C++ tokenizer and Hugging Face's on the validation split).
"""

import argparse
import heapq
import json
import os
import re
import sys
import unicodedata
from collections import Counter, defaultdict

VOCAB_SIZE = 4096
EOT = "<|endoftext|>"
# Exactly what tokenizer.json carries (Rust regex syntax).
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """GPT-2's byte -> printable character map (list indexed by byte)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


BYTE_CHARS = byte_alphabet()


def unicode_class(prefix):
    """A `re` character-class body matching the general categories starting with `prefix`."""
    ranges, start = [], None
    for cp in range(sys.maxunicode + 2):
        inside = cp <= sys.maxunicode and unicodedata.category(chr(cp)).startswith(prefix)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            ranges.append(re.escape(chr(start)) + ("-" + re.escape(chr(cp - 1)) if cp - 1 > start else ""))
            start = None
    return "".join(ranges)


def python_pattern():
    """PATTERN translated to Python's `re` (which has no \\p{..}) with explicit category classes."""
    letters, numbers = unicode_class("L"), unicode_class("N")
    py = PATTERN.replace(r"(?i:", "(?:")  # the contractions: spelled out case-insensitively below
    py = py.replace("'s|'t|'re|'ve|'m|'ll|'d", "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]")
    py = py.replace(r"[^\r\n\p{L}\p{N}]", "[^\\r\\n" + letters + numbers + "]")
    py = py.replace(r"[^\s\p{L}\p{N}]", "[^\\s" + letters + numbers + "]")
    py = py.replace(r"\p{L}", "[" + letters + "]").replace(r"\p{N}", "[" + numbers + "]")
    return re.compile(py)


class Tokenizer:
    """Encoder for a vocab + merges of this layout (what tokenizer.json holds)."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.split = python_pattern()
        self.cache = {}

    def encode_piece(self, piece):
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        word = [BYTE_CHARS[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            best = min(range(len(word) - 1), key=lambda i: (self.ranks.get((word[i], word[i + 1]), 1 << 30), i))
            pair = (word[best], word[best + 1])
            if pair not in self.ranks:
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        ids = [self.vocab[s] for s in word]
        self.cache[piece] = ids
        return ids

    def encode(self, text, add_bos=False):
        """Token ids of `text`; occurrences of <|endoftext|> become id 0 (it is a special token)."""
        ids = [0] if add_bos else []
        for k, chunk in enumerate(text.split(EOT)):
            if k:
                ids.append(0)
            for piece in self.split.findall(chunk):
                ids.extend(self.encode_piece(piece))
        return ids


def train_merges(word_counts, vocab_budget):
    """BPE merges until `vocab_budget` distinct new strings exist. word_counts: Counter of str."""
    words = [[BYTE_CHARS[b] for b in w.encode("utf-8")] for w in sorted(word_counts)]
    counts = [word_counts[w] for w in sorted(word_counts)]
    pair_count, where = defaultdict(int), defaultdict(set)
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_count[pair] += counts[i]
            where[pair].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges, known = [], set(BYTE_CHARS)
    while len(known) - 256 < vocab_budget:
        if not heap:
            raise SystemExit(f"corpus too small for {vocab_budget} merged tokens")
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg or neg == 0:
            continue  # stale entry: the count changed after it was pushed
        merges.append(pair)
        merged = pair[0] + pair[1]
        known.add(merged)
        touched = set()
        for i in sorted(where.pop(pair)):
            w, c = words[i], counts[i]
            for p in zip(w, w[1:]):
                pair_count[p] -= c
                touched.add(p)
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == pair[0] and w[j + 1] == pair[1]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += c
                where[p].add(i)
                touched.add(p)
        pair_count.pop(pair, None)
        for p in sorted(touched):
            if pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], p))
    return merges


def train(text, vocab_size=VOCAB_SIZE):
    """Returns (vocab dict str -> id, merges list of (a, b)) for the layout in the header."""
    split = python_pattern()
    counts = Counter()
    for chunk in text.split(EOT):
        counts.update(split.findall(chunk))
    merges = train_merges(counts, vocab_size - 1 - 256)
    vocab = {EOT: 0}
    for ch in BYTE_CHARS:
        vocab[ch] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    assert len(vocab) == vocab_size, len(vocab)
    return vocab, merges


def tokenizer_json(vocab, merges):
    bos = {"SpecialToken": {"id": EOT, "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 0, "content": EOT, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": EOT, "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {EOT: {"id": EOT, "ids": [0], "tokens": [EOT]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


def tokenizer_config(max_length):
    return {"bos_token": EOT, "eos_token": EOT, "pad_token": EOT, "unk_token": None,
            "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "model_max_length": max_length, "tokenizer_class": "PreTrainedTokenizerFast"}


def write(directory, vocab, merges, max_length):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(max_length), f, indent=2)
        f.write("\n")


def load(directory):
    """Tokenizer from a tokenizer.json this file wrote."""
    with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
        model = json.load(f)["model"]
    return Tokenizer(model["vocab"], [tuple(m) for m in model["merges"]])


def main(argv=None):
    ap = argparse.ArgumentParser(description="Train the byte-level BPE on corpus/train.txt.")
    ap.add_argument("--corpus", required=True, help="directory with train.txt (tools/train/corpus.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    ap.add_argument("--max-length", type=int, default=2048)
    args = ap.parse_args(argv)
    with open(os.path.join(args.corpus, "train.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    vocab, merges = train(text, args.vocab_size)
    write(args.out, vocab, merges, args.max_length)
    print(f"vocab {len(vocab)}, merges {len(merges)} -> {args.out}")


if __name__ == "__main__":
    main()
