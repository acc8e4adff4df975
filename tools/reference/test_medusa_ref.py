"""Self-checks for medusa_ref.py (Medusa heads) against a brute-force second implementation.

What it is for
  /usr/bin/python3 tools/reference/test_medusa_ref.py [--fixtures DIR]
  (without --fixtures it runs make_fixtures.py --only llama-f32 into a temporary directory).
  For every Medusa head of DIR/spec/reference.json (from medusa_ref.py): bf_medusa re-derives
  from the files each head's logits on the target's final-norm states (vLLM's config key renaming,
  the medusa_heads. prefix, the shared head, token_map's row cut, logit_scale), and with them the
  drafts, margins, head-0 logits and catch-up argmax; dropping the biases or the row cut changes the
  drafts; draft_heads_ref.py refuses the error entry's bad token_map, a missing token_map,
  k > num_heads and config keys that give different head counts.

What it must not do
  Share code with medusa_ref.py / draft_heads_ref.py beyond loading weights and reading the target
  hidden states transformer_ref.py returns: the brute force is written separately on purpose.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import draft_heads_ref as dh  # noqa: E402
import medusa_ref  # noqa: E402
import transformer_ref as ref  # noqa: E402


def bf_medusa(directory, final, bias=True, cut_rows=True):
    """A Medusa head dir on final hidden states [T, H]: (per head logits [T, D], token_map or None)."""
    cfg = json.load(open(os.path.join(directory, "config.json")))
    for key in list(cfg):  # vLLM's MedusaConfig.from_pretrained
        if "num" in key and "heads" in key:
            cfg["num_heads"] = cfg.pop(key)
        elif "num" in key and "layers" in key:
            cfg["num_hidden_layers"] = cfg.pop(key)
    W = {n.replace("medusa_heads.", ""): t for n, t in ref.read_model_dir(directory).items()}
    token_map = W.get("token_map")
    out = []
    for h in range(cfg.get("num_heads", 5)):
        x = final
        for layer in range(cfg.get("num_hidden_layers", 1)):
            y = x @ W[f"blocks.{h}.layers.{layer}.weight"].double().T
            if bias and cfg.get("medusa_fc_bias"):
                y = y + W[f"blocks.{h}.layers.{layer}.bias"].double()
            x = x + y * torch.sigmoid(y)
        head = W["lm_heads.0.weight" if cfg.get("original_lm_head") else f"lm_heads.{h}.weight"].double()
        if token_map is not None and head.shape[0] == cfg["vocab_size"]:
            head = head[token_map.long()] if cut_rows else head[:len(token_map)]
        out.append(cfg.get("logit_scale", 1.0) * (x @ head.T))
    return out, token_map


def check_medusa(root):
    r = json.load(open(os.path.join(root, "spec", "reference.json")))
    entries = [e for e in r["heads"] if e["method"] == "medusa"]
    assert [e["name"] for e in entries] == ["medusa-llama-f32", "medusa-trunc-llama-f32", "medusa-shared-llama-f32"]
    for e in entries:
        target = ref.load_model(os.path.join(root, e["target"]))
        tokens, n, k, directory = e["token_ids"], len(e["token_ids"]), e["k"], os.path.join(root, "spec", e["name"])
        final = ref.forward(target, tokens, hidden_states=True)[1][-1][:n - 1]  # positions 0..n-2

        def drafts_of(heads, token_map):
            ids = [int(heads[i][n - 2].argmax()) for i in range(k)]
            return [int(token_map[j]) for j in ids] if token_map is not None else ids

        heads, token_map = bf_medusa(directory, final)
        assert len(heads) == e["num_heads"] and k == min(4, len(heads)) and e["logits_position"] == n - 2
        assert drafts_of(heads, token_map) == e["drafts"], (e["name"], drafts_of(heads, token_map), e["drafts"])
        margins = [float(v[0] - v[1]) for v in (torch.topk(heads[i][n - 2], 2).values for i in range(k))]
        assert np.allclose(margins, e["draft_margins"], rtol=1e-12, atol=1e-9)
        assert np.allclose(heads[0][n - 2].numpy(), e["logits"], rtol=1e-12, atol=1e-9)
        assert heads[0].argmax(dim=-1).tolist() == e["catch_up_argmax"]
        if e["num_layers"] == 2:  # the biased head: without them it drafts differently
            assert drafts_of(*bf_medusa(directory, final, bias=False)) != e["drafts"]
        if e["name"] == "medusa-shared-llama-f32":  # full-vocabulary rows: token_map picks them
            assert drafts_of(*bf_medusa(directory, final, cut_rows=False)) != e["drafts"]
            head = dh.load_head(directory, target)
            try:
                dh.run(head, target, tokens, head.num_heads + 1)
                raise AssertionError("k > num_heads accepted")
            except ValueError as err:
                assert "heads" in str(err), err
            cfg = json.load(open(os.path.join(directory, "config.json")))
            stored = {n_: t for n_, t in ref.read_model_dir(directory).items() if n_ != "token_map"}
            try:
                dh.build_head(cfg, stored, target, "medusa")
                raise AssertionError("a truncated vocabulary without token_map accepted")
            except ValueError as err:
                assert "token_map" in str(err), err
    try:
        medusa_ref.medusa_config({"medusa_num_heads": 3, "num_heads": 2})
        raise AssertionError("disagreeing head counts accepted")
    except ValueError as err:
        assert "disagree" in str(err), err
    bad, = [e for e in r["errors"] if e["method"] == "medusa"]
    try:
        dh.load_head(os.path.join(root, "spec", bad["name"]), ref.load_model(os.path.join(root, bad["target"])))
        raise AssertionError(f"{bad['name']} accepted")
    except ValueError as err:
        assert "token_map" in str(err), err
    print(f"{'medusa':24s} ok  {len(entries)} heads re-derived (drafts, margins, logits, catch-up), "
          f"bias and token_map row cut matter, refusals")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=None, help="a make_fixtures.py --out directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.fixtures
        if root is None:
            root = tmp
            subprocess.run([sys.executable, os.path.join(HERE, "..", "fixtures", "make_fixtures.py"),
                            "--out", tmp, "--only", "llama-f32"], check=True, capture_output=True)
        check_medusa(root)


if __name__ == "__main__":
    main()
