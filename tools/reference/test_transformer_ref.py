"""Self-checks for transformer_ref.py against a brute-force second implementation.

What it is for
  /usr/bin/python3 tools/reference/test_transformer_ref.py [--fixtures DIR]
  (without --fixtures it runs make_fixtures.py into a temporary directory).
  For every fixture it checks
    - causality: forward(prefix) == forward(full)[:len(prefix)];
    - each decoder layer and the final norm against a per-query, per-head loop
      in numpy (explicit GQA index h // g, explicit window test, RoPE as 2x2
      rotations of (i, i + hd/2) pairs, llama3 frequencies vectorised);
    - reference.json matches a fresh forward/greedy, and the CLI agrees;
    - that the brute force is sensitive: the wrong GQA mapping (h % n_kv), a
      dropped sliding window, or (mixture of experts) one expert fewer per token
      changes the layer output where the fixture says it must.

What it must not do
  Share code with transformer_ref.py beyond loading weights and reading the
  hidden states it returns: the brute force is written separately on purpose.
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


def bf_inv_freq(cfg, hd):
    theta = float(cfg.get("rope_theta", 10000.0))
    f = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    s = cfg.get("rope_scaling") or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        return f / s["factor"]
    if kind == "llama3":
        orig = s["original_max_position_embeddings"]
        wl = 2 * np.pi / f
        ratio = orig / wl
        smooth = (ratio - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
        smooth = np.clip(smooth, 0.0, 1.0)  # 0 -> f/factor (long wavelengths), 1 -> f (short)
        return (1 - smooth) * f / s["factor"] + smooth * f
    return f


def bf_rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def bf_rope(vec, pos, inv):
    half = len(vec) // 2
    out = vec.copy()
    for i in range(half):
        c, s = math.cos(pos * inv[i]), math.sin(pos * inv[i])
        a, b = vec[i], vec[i + half]
        out[i], out[i + half] = a * c - b * s, a * s + b * c
    return out


def bf_window(cfg, layer):
    arch = cfg["architectures"][0]
    if arch == "MistralForCausalLM":
        w = cfg.get("sliding_window")
        return w if isinstance(w, int) and w > 0 else None
    if arch.startswith("Qwen") and cfg.get("use_sliding_window") and layer >= cfg["max_window_layers"]:
        return cfg["sliding_window"]
    return None


def bf_sparse(cfg, layer):
    if cfg["architectures"][0] not in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"):
        return False
    step, dense = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers") or []
    return layer not in dense and cfg.get("num_experts", 128) > 0 and (layer + 1) % step == 0


def bf_experts(cfg, proj, p, hn, top_k=None):
    """Mixture of experts for one position: the router's softmax, experts sorted by probability."""
    logits = proj("mlp.gate", hn)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    k = top_k or cfg.get("num_experts_per_tok", 8)
    chosen = sorted(range(len(probs)), key=lambda e: -probs[e])[:k]
    weights = np.array([probs[e] for e in chosen])
    if cfg.get("norm_topk_prob", False):
        weights = weights / weights.sum()
    out = np.zeros_like(hn)
    for w, e in zip(weights, chosen):
        gate, up = proj(f"mlp.experts.{e}.gate_proj", hn), proj(f"mlp.experts.{e}.up_proj", hn)
        out += w * proj(f"mlp.experts.{e}.down_proj", gate / (1 + np.exp(-gate)) * up)
    if cfg["architectures"][0] == "Qwen2MoeForCausalLM":
        gate, up = proj("mlp.shared_expert.gate_proj", hn), proj("mlp.shared_expert.up_proj", hn)
        shared = proj("mlp.shared_expert.down_proj", gate / (1 + np.exp(-gate)) * up)
        out += shared / (1 + np.exp(-proj("mlp.shared_expert_gate", hn)[0]))
    return out


def bf_layer(m, W, layer, x, gqa="div", window="config", top_k=None):
    """One decoder layer, loops over positions and heads. x: numpy [T, H]."""
    cfg, eps = m.config, m.eps
    p = f"model.layers.{layer}."
    nh, nkv, hd = m.n_heads, m.n_kv_heads, m.head_dim
    g = nh // nkv
    win = bf_window(cfg, layer) if window == "config" else None
    inv = bf_inv_freq(cfg, hd)
    t = x.shape[0]

    def proj(name, v):
        y = W[p + name + ".weight"] @ v
        return y + W[p + name + ".bias"] if p + name + ".bias" in W else y

    xn = [bf_rms(x[i], W[p + "input_layernorm.weight"], eps) for i in range(t)]
    q = [proj("self_attn.q_proj", v).reshape(nh, hd) for v in xn]
    k = [proj("self_attn.k_proj", v).reshape(nkv, hd) for v in xn]
    v = [proj("self_attn.v_proj", u).reshape(nkv, hd) for u in xn]
    if p + "self_attn.q_norm.weight" in W:
        q = [np.stack([bf_rms(r, W[p + "self_attn.q_norm.weight"], eps) for r in qi]) for qi in q]
        k = [np.stack([bf_rms(r, W[p + "self_attn.k_norm.weight"], eps) for r in ki]) for ki in k]
    q = [np.stack([bf_rope(r, pos, inv) for r in q[pos]]) for pos in range(t)]
    k = [np.stack([bf_rope(r, pos, inv) for r in k[pos]]) for pos in range(t)]
    out = np.zeros((t, x.shape[1]))
    for pos in range(t):
        heads = []
        for h in range(nh):
            j = h // g if gqa == "div" else h % nkv
            keys = [kp for kp in range(pos + 1) if win is None or pos - kp < win]
            scores = np.array([q[pos][h] @ k[kp][j] / math.sqrt(hd) for kp in keys])
            e = np.exp(scores - scores.max())
            a = e / e.sum()
            heads.append(sum(a[n] * v[kp][j] for n, kp in enumerate(keys)))
        attn = proj("self_attn.o_proj", np.concatenate(heads))
        h1 = x[pos] + attn
        hn = bf_rms(h1, W[p + "post_attention_layernorm.weight"], eps)
        if bf_sparse(cfg, layer):
            out[pos] = h1 + bf_experts(cfg, proj, p, hn, top_k)
            continue
        gate, up = proj("mlp.gate_proj", hn), proj("mlp.up_proj", hn)
        out[pos] = h1 + proj("mlp.down_proj", gate / (1 + np.exp(-gate)) * up)
    return out


# ----------------------------------------------------------------------------- checks


def check_causality(m, prompt):
    full = ref.forward(m, prompt)
    for n in (1, 5, len(prompt) - 1):
        diff = (ref.forward(m, prompt[:n]) - full[:n]).abs().max().item()
        assert diff < TOL, f"causality broken at prefix {n}: {diff}"


def check_layers(m, prompt):
    W = {n: t.numpy() for n, t in m.weights.items()}
    _, states = ref.forward(m, prompt, hidden_states=True)
    states = [s.numpy() for s in states]
    for i in range(m.n_layers):
        bf = bf_layer(m, W, i, states[i])
        if i + 1 < m.n_layers:
            diff = np.abs(bf - states[i + 1]).max()
        else:
            normed = np.stack([bf_rms(r, W["model.norm.weight"], m.eps) for r in bf])
            diff = np.abs(normed - states[-1]).max()
        assert diff < TOL, f"layer {i}: brute force differs by {diff}"
    return W, states


def check_sensitivity(m, W, states):
    """The brute force (and so the check) would notice a wrong GQA map or window."""
    notes = []
    if m.n_heads != m.n_kv_heads and m.n_kv_heads > 1:
        wrong = bf_layer(m, W, 0, states[0], gqa="mod")
        right = bf_layer(m, W, 0, states[0])
        assert np.abs(wrong - right).max() > 1e-3, "GQA mapping does not matter?"
        notes.append("gqa-map")
    for i in range(m.n_layers):
        if m.windows[i] is not None:
            nowin = bf_layer(m, W, i, states[i], window="none")
            assert np.abs(nowin - bf_layer(m, W, i, states[i])).max() > 1e-3, f"window {i} inert"
            notes.append(f"window@{i}")
        if bf_sparse(m.config, i) and m.top_k > 1:
            fewer = bf_layer(m, W, i, states[i], top_k=m.top_k - 1)
            assert np.abs(fewer - bf_layer(m, W, i, states[i])).max() > 1e-3, f"experts of layer {i} inert"
            notes.append(f"experts@{i}")
    return notes


def check_reference_json(m, directory):
    r = json.load(open(os.path.join(directory, "reference.json")))
    logits = ref.forward(m, r["prompt_token_ids"])
    assert logits.tolist() == r["logits"], "reference logits not reproducible"
    tokens, margins = ref.greedy(m, r["prompt_token_ids"], r["max_new_tokens"])
    assert tokens == r["greedy_token_ids"] and min(margins) == r["greedy_min_margin"]
    # greedy == argmax of one forward over prompt + continuation (teacher forcing)
    seq = r["prompt_token_ids"] + tokens[:-1]
    tf = ref.forward(m, seq)[len(r["prompt_token_ids"]) - 1:].argmax(dim=-1).tolist()
    assert tf == tokens, (tf, tokens)
    assert len(tokens) == r["max_new_tokens"] or tokens[-1] in r["eos_token_ids"]
    assert not set(tokens[:-1]) & set(r["eos_token_ids"])
    return r


def check_cli(directory, r):
    cmd = [sys.executable, os.path.join(HERE, "transformer_ref.py"), "--model", directory,
           "--prompt-tokens", ",".join(map(str, r["prompt_token_ids"])),
           "--max-tokens", str(r["max_new_tokens"])]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert out == {"token_ids": r["greedy_token_ids"]}, out


def check_config_semantics(name, m):
    if name == "qwen2-f32":
        assert m.windows == [None] * m.n_layers, "disabled Qwen2 window must be ignored"
    if name == "mistral-f16":
        assert all(w == 8 for w in m.windows)
    if name == "qwen2-swa-f32":
        assert m.windows == [None, 6, 6], m.windows
    if name == "qwen3-moe-f32":
        assert m.sparse == [True, False, True] and m.norm_topk_prob, m.sparse
    if name == "qwen3-moe-bf16":
        assert m.sparse == [False, True] and not m.norm_topk_prob, m.sparse
    if name == "qwen2-moe-f32":
        assert m.sparse == [True, True] and m.shared_expert and m.qkv_bias and not m.qk_norm
    if name == "llama3-bf16":
        base = ref.rope_inv_freq(m.head_dim, m.config["rope_theta"], None)
        ratio = (m.inv_freq / base).tolist()
        kept = sum(abs(x - 1) < 1e-12 for x in ratio)
        divided = sum(abs(x - 1 / 8) < 1e-12 for x in ratio)
        assert kept >= 1 and divided >= 1 and kept + divided < len(ratio), ratio
        return f"llama3 freqs kept/smoothed/divided = {kept}/{len(ratio) - kept - divided}/{divided}"
    return ""


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
                            "--out", tmp], check=True, capture_output=True)
        for name in json.load(open(os.path.join(root, "manifest.json")))["fixtures"]:
            directory = os.path.join(root, name)
            m = ref.load_model(directory)
            r = check_reference_json(m, directory)
            check_causality(m, r["prompt_token_ids"])
            W, states = check_layers(m, r["prompt_token_ids"])
            notes = check_sensitivity(m, W, states)
            extra = check_config_semantics(name, m)
            check_cli(directory, r)
            print(f"{name:24s} ok  {' '.join(notes)} {extra}")


if __name__ == "__main__":
    main()
