"""Self-checks for dflash_ref.py (the DFlash drafter) against a brute-force second implementation.

What it is for
  /usr/bin/python3 tools/reference/test_dflash_ref.py [--fixtures DIR]
  (without --fixtures it runs make_fixtures.py --only llama-f32 into a temporary directory).
  For every dflash entry of DIR/spec/reference.json it re-derives, from the files, with numpy:
  the context features by the HF rule (hidden_states[id + 1]: the input of layer id + 1, or the
  final-norm output for the last layer), fc and hidden_norm, then each draft layer as ONE attention
  matrix over the sequence [context; block] with an explicit visibility mask (context rows get keys
  and values only, from hidden_norm's output, without input_layernorm), a per-query, per-head loop
  (explicit GQA index h // g), RoPE as 2x2 rotations of (i, i + hd/2) pairs. It asserts the same
  drafts, margins, block-row-1 logits (to 1e-9) and block argmax as reference.json and as
  dflash_ref.run_dflash, and the same drafts from draft_heads_ref.py's CLI (--method dflash).
  Per-layer attention (layer_types, sliding_window) and attention biases are re-derived the same way.
  Sensitivity: flipping causal / non-causal changes the drafts (and, for a head with sliding-window
  layers, dropping the window does too); reading each target layer's input
  instead of its output (hidden_states[id]) changes them too. Refusals: the error entry (a target
  layer id past the target), k >= block_size, block_size given twice with different values, a
  draft vocabulary without d2t, an unexpected tensor.

What it must not do
  Share code with dflash_ref.py / draft_heads_ref.py beyond loading weights and reading the target
  hidden states transformer_ref.py returns: the brute force is written separately on purpose.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import transformer_ref as ref  # noqa: E402

TOL = 1e-9


# ----------------------------------------------------------------------------- brute force


def bf_rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def bf_rope(vec, pos, theta):
    """RoPE of one head vector: pair (i, i + hd/2) rotated by pos * theta^(-2i/hd)."""
    hd, out = vec.shape[0], vec.copy()
    for i in range(hd // 2):
        a = pos * theta ** (-2.0 * i / hd)
        c, s = math.cos(a), math.sin(a)
        out[i] = vec[i] * c - vec[i + hd // 2] * s
        out[i + hd // 2] = vec[i + hd // 2] * c + vec[i] * s
    return out


def bf_silu(v):
    return v / (1.0 + np.exp(-v))


def bf_dflash(directory, target, tokens, k, causal=None, feature_offset=1, windows=True):
    """Block logits [k + 1, D] and the draft id -> target id map (or None). causal None: the config's
    (per layer: stated for all, else sliding-window layers causal), True / False: every layer's;
    feature_offset 1: HF's hidden_states[id + 1] (0 reads each layer's input instead, a mistake);
    windows False: the sliding windows ignored."""
    cfg = json.load(open(os.path.join(directory, "config.json")))
    W = {n: t.double().numpy() if t.dtype.is_floating_point else t.numpy()
         for n, t in ref.read_model_dir(directory).items()}
    dc = cfg["dflash_config"]
    types = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
    stated = dc.get("causal", cfg.get("is_causal"))
    layer_causal = [(causal if causal is not None else stated if stated is not None else t == "sliding_attention")
                    for t in types]
    layer_window = [cfg["sliding_window"] if windows and t == "sliding_attention" else None for t in types]

    def bias(name, rows):  # a projection's bias, zeros without attention_bias
        return W[name] if cfg.get("attention_bias") else np.zeros(rows)
    nh, nkv, hd, eps, theta = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                               cfg["rms_norm_eps"], cfg["rope_theta"])
    n, L = len(tokens), target.n_layers
    _, states = ref.forward(target, tokens, hidden_states=True)  # [input of layer 0..L-1, final norm]
    feats = []
    for i in dc["target_layer_ids"]:
        j = i + feature_offset
        feats.append((states[-1] if j == L else states[j]).numpy()[:n - 1])
    cn = bf_rms(np.concatenate(feats, axis=1) @ W["fc.weight"].T, W["hidden_norm.weight"], eps)
    tw = {n_: t.numpy() for n_, t in target.weights.items()}
    embed = W.get("embed_tokens.weight", tw["model.embed_tokens.weight"])
    block = [tokens[-1]] + [dc["mask_token_id"]] * k
    x = embed[block].copy()
    B, T = len(block), n - 1 + len(block)
    pos = list(range(n - 1)) + [n - 1 + i for i in range(B)]  # of the sequence [context; block]
    for layer in range(cfg["num_hidden_layers"]):
        allowed = np.ones((B, T), dtype=bool)  # block query i over [context; block]
        for i in range(B):
            for t in range(T):
                ahead, behind = pos[t] - pos[n - 1 + i], pos[n - 1 + i] - pos[t]
                if layer_causal[layer] and ahead > 0:
                    allowed[i, t] = False
                w = layer_window[layer]
                if w is not None and (behind >= w or (not layer_causal[layer] and ahead >= w)):
                    allowed[i, t] = False
        p = f"layers.{layer}."
        hn = bf_rms(x, W[p + "input_layernorm.weight"], eps)
        seq = np.concatenate([cn, hn])  # what keys / values are computed from
        kvw = nkv * hd
        K = (seq @ W[p + "self_attn.k_proj.weight"].T + bias(p + "self_attn.k_proj.bias", kvw)).reshape(T, nkv, hd)
        V = (seq @ W[p + "self_attn.v_proj.weight"].T + bias(p + "self_attn.v_proj.bias", kvw)).reshape(T, nkv, hd)
        Q = (hn @ W[p + "self_attn.q_proj.weight"].T + bias(p + "self_attn.q_proj.bias", nh * hd)).reshape(B, nh, hd)
        K = np.stack([[bf_rope(bf_rms(K[t, g], W[p + "self_attn.k_norm.weight"], eps), pos[t], theta)
                       for g in range(nkv)] for t in range(T)])
        Q = np.stack([[bf_rope(bf_rms(Q[i, h], W[p + "self_attn.q_norm.weight"], eps), pos[n - 1 + i], theta)
                       for h in range(nh)] for i in range(B)])
        attn = np.zeros((B, nh * hd))
        for i in range(B):
            for h in range(nh):
                g = h // (nh // nkv)
                scores = np.array([Q[i, h] @ K[t, g] / math.sqrt(hd) if allowed[i, t] else -np.inf
                                   for t in range(T)])
                w = np.exp(scores - scores.max())
                w /= w.sum()
                attn[i, h * hd:(h + 1) * hd] = w @ V[:, g]
        x = x + attn @ W[p + "self_attn.o_proj.weight"].T + bias(p + "self_attn.o_proj.bias", x.shape[1])
        y = bf_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        mlp = bf_silu(y @ W[p + "mlp.gate_proj.weight"].T) * (y @ W[p + "mlp.up_proj.weight"].T)
        x = x + mlp @ W[p + "mlp.down_proj.weight"].T
    head = W.get("lm_head.weight", tw["lm_head.weight"])
    logits = bf_rms(x, W["norm.weight"], eps) @ head.T
    d2t = W.get("d2t")
    return logits, (None if d2t is None else np.arange(len(d2t)) + d2t)


def drafts_of(logits, to_target):
    ids = [int(np.argmax(row)) for row in logits[1:]]
    return [int(to_target[i]) for i in ids] if to_target is not None else ids


def expect_refusal(fn, *words):
    try:
        fn()
    except ValueError as err:
        assert all(w in str(err) for w in words), err
        return
    raise AssertionError(f"accepted; expected a refusal mentioning {words}")


# ----------------------------------------------------------------------------- checks


def check_entry(root, e):
    import dflash_ref
    import draft_heads_ref as dh
    target = ref.load_model(os.path.join(root, e["target"]))
    directory = os.path.join(root, "spec", e["name"])
    tokens, k, n = e["token_ids"], e["k"], len(e["token_ids"])
    logits, to_target = bf_dflash(directory, target, tokens, k)
    drafts = drafts_of(logits, to_target)
    assert drafts == e["drafts"], (e["name"], drafts, e["drafts"])
    margins = [float(a - b) for a, b in (np.sort(row)[::-1][:2] for row in logits[1:])]
    assert np.allclose(margins, e["draft_margins"], rtol=0, atol=TOL), (margins, e["draft_margins"])
    assert e["logits_position"] == n and e["method"] == e["layout"] == "dflash" and "catch_up_argmax" not in e
    assert np.abs(logits[1] - np.array(e["logits"])).max() < TOL
    assert logits.argmax(axis=1).tolist() == e["block_logits_argmax"] and len(e["block_logits_argmax"]) == k + 1
    head = dh.load_head(directory, target)
    assert isinstance(head, dflash_ref.DFlashHead) and head.method == "dflash"
    assert len(head.blocks) == e["num_layers"]
    result = dh.run(head, target, tokens, k)
    assert result["drafts"] == drafts
    assert np.abs(result["block_logits"].numpy() - logits).max() < TOL
    # Flipped: every layer the other way (a head with sliding-window layers: every layer non-causal).
    causal = head.layer_causal(0) if head.sliding_window is None else True
    flipped = drafts_of(*bf_dflash(directory, target, tokens, k, causal=not causal))
    assert flipped != drafts, (e["name"], "causal / non-causal draft the same", flipped)
    if head.sliding_window is not None:
        unwindowed = drafts_of(*bf_dflash(directory, target, tokens, k, windows=False))
        assert unwindowed != drafts, (e["name"], "with and without the sliding window draft the same", unwindowed)
    inputs = drafts_of(*bf_dflash(directory, target, tokens, k, feature_offset=0))
    assert inputs != drafts, (e["name"], "layer inputs instead of outputs draft the same", inputs)
    cli = subprocess.run([sys.executable, os.path.join(HERE, "draft_heads_ref.py"), "--target",
                          os.path.join(root, e["target"]), "--head", directory, "--method", "dflash",
                          "--tokens", ",".join(map(str, tokens)), "--k", str(k)],
                         check=True, capture_output=True, text=True)
    assert json.loads(cli.stdout)["drafts"] == drafts, cli.stdout
    # refusals, on this head's files
    cfg = json.load(open(os.path.join(directory, "config.json")))
    stored = ref.read_model_dir(directory)
    expect_refusal(lambda: dh.run(head, target, tokens, head.block_size), "block_size")
    other = dict(cfg, block_size=head.block_size + 1, dflash_config=dict(cfg["dflash_config"],
                                                                          block_size=head.block_size))
    expect_refusal(lambda: dh.build_head(other, stored, target, "dflash"), "block_size")
    expect_refusal(lambda: dh.build_head(cfg, dict(stored, extra=torch.zeros(1)), target, "dflash"), "extra")
    if "d2t" in stored:
        no_map = {n_: t for n_, t in stored.items() if n_ != "d2t"}
        expect_refusal(lambda: dh.build_head(cfg, no_map, target, "dflash"), "d2t")
    print(f"{e['name']:24s} ok  drafts {drafts} re-derived (logits, margins, block argmax, CLI); "
          f"{'causal' if causal else 'non-causal'} flipped and layer inputs draft {flipped} / {inputs}"
          f"{'' if head.sliding_window is None else f'; without the window {unwindowed}'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=None, help="a make_fixtures.py --out directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import draft_heads_ref as dh
    with tempfile.TemporaryDirectory() as tmp:
        root = args.fixtures
        if root is None:
            root = tmp
            subprocess.run([sys.executable, os.path.join(HERE, "..", "fixtures", "make_fixtures.py"),
                            "--out", tmp, "--only", "llama-f32"], check=True, capture_output=True)
        r = json.load(open(os.path.join(root, "spec", "reference.json")))
        entries = [e for e in r["heads"] if e["method"] == "dflash"]
        assert [e["name"] for e in entries] == ["dflash-llama-f32", "dflash-causal-llama-f32",
                                                "dflash-swa-llama-f32"], entries
        for e in entries:
            check_entry(root, e)
        bad, = [e for e in r["errors"] if e["method"] == "dflash"]
        target = ref.load_model(os.path.join(root, bad["target"]))
        expect_refusal(lambda: dh.load_head(os.path.join(root, "spec", bad["name"]), target), "target_layer_ids")
        print(f"{bad['name']:24s} ok  refused: {bad['reason']}")


if __name__ == "__main__":
    main()
