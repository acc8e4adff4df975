"""Token streams and training windows of the bundled model family.

What it is for
  encode_corpus() turns corpus/{train,valid}.txt into uint16 token streams (.npy) with
  tokenizer_bpe.py (the encoder check_tokenizer.py proves equal to HF's and Baton's). Windows:
  every training or validation sequence is [<|endoftext|>] + T-1 consecutive stream tokens, so
  position 0 always holds the BOS the tokenizer prepends to a prompt, and labels are the next
  tokens. Training offsets come from numpy's RandomState(seed + step), so batch `step` is the same
  on any device and independent of how many steps ran before (resumable, reproducible).

What it must not do
  Depend on torch's RNG (device-dependent) or on wall-clock; mix the validation split into training.
"""

import os

import numpy as np
import torch

import tokenizer_bpe

BOS = 0


def encode_corpus(corpus_dir, tokenizer_dir, out_dir):
    """Writes out_dir/{train,valid}.npy; returns {split: number of tokens}."""
    tok = tokenizer_bpe.load(tokenizer_dir)
    os.makedirs(out_dir, exist_ok=True)
    sizes = {}
    for split in ("train", "valid"):
        with open(os.path.join(corpus_dir, split + ".txt"), encoding="utf-8", newline="") as f:
            ids = tok.encode(f.read())
        arr = np.asarray(ids, dtype=np.uint16)
        np.save(os.path.join(out_dir, split + ".npy"), arr)
        sizes[split] = int(arr.size)
    return sizes


def load_stream(data_dir, split):
    return np.load(os.path.join(data_dir, split + ".npy")).astype(np.int64)


def train_batch(stream, step, batch, seq_len, seed):
    """[batch, seq_len] int64: BOS + seq_len-1 tokens from offsets drawn with RandomState(seed+step)."""
    rng = np.random.RandomState((seed * 1_000_003 + step) % (2 ** 32))
    starts = rng.randint(0, len(stream) - seq_len, size=batch)
    rows = np.stack([stream[s:s + seq_len - 1] for s in starts])
    return torch.from_numpy(np.concatenate([np.full((batch, 1), BOS), rows], axis=1))


def valid_windows(stream, seq_len, limit=None):
    """Non-overlapping validation windows [n, seq_len], each BOS + seq_len-1 tokens, in order."""
    n = (len(stream) - 1) // (seq_len - 1)
    if limit:
        n = min(n, limit)
    rows = [stream[i * (seq_len - 1):(i + 1) * (seq_len - 1)] for i in range(n)]
    return torch.from_numpy(np.concatenate([np.full((n, 1), BOS), np.stack(rows)], axis=1))


def token_frequencies(stream, vocab_size):
    return np.bincount(stream, minlength=vocab_size)
