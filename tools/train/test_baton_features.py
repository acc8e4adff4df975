"""EAGLE-3 training features from Baton's engine agree with the PyTorch forward's (ctest family_baton_features).

What it checks
  On the bundled target with its EAGLE-3 head's aux layers: BatonFeatures.aux() (baton generate with
  extract_hidden_states, files read back) equals train_heads.target_pass's aux within 1e-4, on
  token windows of the training length; one training step's losses are the same with either
  source (within 1e-4, relative); and the comparison can fail: the same layers in another order
  differ by far more than the tolerance.
      /usr/bin/python3 tools/train/test_baton_features.py --family models/baton-tiny-code
          --baton build/release/cli/baton

What it must not do
  Compare anything the two sources do not both compute in float32 (amp is off).
"""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_heads  # noqa: E402
from test_heads import load_training_heads  # noqa: E402
from baton_features import BatonFeatures  # noqa: E402
from llama import load_hf_dir  # noqa: E402

TOLERANCE = 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True)
    ap.add_argument("--baton", required=True)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(2)
    target_dir = os.path.join(a.family, "target")
    target = load_hf_dir(target_dir).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    with open(os.path.join(a.family, "eagle3", "config.json")) as f:
        layers = json.load(f)["eagle_aux_hidden_state_layer_ids"]
    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(3, target.config.vocab_size, (a.windows, a.seq_len), generator=gen)

    features = BatonFeatures(a.baton, target_dir, layers, threads=2)
    _, want, _ = train_heads.target_pass(target, ids, layers, "cpu", False)
    got = features.aux(ids)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = float((got - want).abs().max())
    print(f"aux {list(got.shape)}: max |baton - pytorch| = {err:.3g} (values up to {float(want.abs().max()):.3g})")
    assert err < TOLERANCE, f"Baton's features differ from the PyTorch forward's by {err}"

    # The test can fail: the same layers in another order are other features.
    swapped = BatonFeatures(a.baton, target_dir, list(reversed(layers)), threads=2).aux(ids)
    assert float((swapped - want).abs().max()) > 100 * TOLERANCE, "reordered layers went unnoticed"

    # One training step's losses, with the features from either source.
    eagle, mtp, _ = load_training_heads(a.family, target)
    with torch.no_grad():
        l_torch, _ = train_heads.head_losses(target, None, eagle, mtp, ids, 2, "cpu", False)
        l_baton, _ = train_heads.head_losses(target, None, eagle, mtp, ids, 2, "cpu", False, features=features)
    for k in l_torch:
        rel = abs(float(l_torch[k]) - float(l_baton[k])) / max(1e-6, abs(float(l_torch[k])))
        print(f"loss {k}: pytorch {float(l_torch[k]):.6f} baton {float(l_baton[k]):.6f}")
        assert rel < TOLERANCE, (k, rel)
    print("ok")


if __name__ == "__main__":
    main()
