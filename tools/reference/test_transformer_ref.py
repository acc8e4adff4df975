"""Self-checks for transformer_ref.py against a brute-force second implementation.

What it is for
  /usr/bin/python3 tools/reference/test_transformer_ref.py [--fixtures DIR]
  (without --fixtures it runs make_fixtures.py into a temporary directory).
  For every fixture it checks
    - causality: forward(prefix) == forward(full)[:len(prefix)];
    - each decoder layer and the final norm against a per-query, per-head loop
      in numpy (explicit GQA index h // g, explicit window test, RoPE as 2x2
      rotations of (i, i + rot/2) pairs for i < rot/2, rot = head_dim unless
      partial, llama3 frequencies vectorised); for Qwen3-Next also zero-centred
      norms (1 + w), the per-head [query | gate] split of q_proj and the sigmoid
      output gate, and the gated DeltaNet as explicit loops: the per-group
      [q | k | v | z] / [b | a] unpacking of the fused projections, the causal conv
      tap by tap, and the delta-rule recurrence token by token, value head by value head;
    - reference.json matches a fresh forward/greedy, and the CLI agrees;
    - that the brute force is sensitive: the wrong GQA mapping (h % n_kv), a
      dropped sliding window, or (mixture of experts) one expert fewer per token
      changes the layer output where the fixture says it must; for Qwen3-Next,
      likewise a DeltaNet state reset every token or every 8 tokens, a conv using
      only its last tap, the wrong value->key head map (h % nk), q/k/v/z read as
      un-grouped blocks, a dropped attention output gate, and full instead of
      partial RoPE;
    - that the reference rejects a Qwen3-Next checkpoint with mtp.* tensors.

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
    """Rotates the pairs (i, i + half), half = len(inv); dims from 2 * half on are left as they are."""
    half = len(inv)
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


def bf_next(cfg):
    return cfg["architectures"][0] == "Qwen3NextForCausalLM"


def bf_norm_w(cfg, w):
    """Qwen3-Next's RMSNorms (not its gated DeltaNet norm) scale by 1 + w."""
    return 1.0 + w if bf_next(cfg) else w


def bf_layer_type(cfg, layer):
    if not bf_next(cfg):
        return "full_attention"
    if "layer_types" in cfg:
        return cfg["layer_types"][layer]
    n = cfg.get("full_attention_interval", 4)
    return "full_attention" if layer % n == n - 1 else "linear_attention"


def bf_rotary_dim(cfg, hd):
    return int(hd * cfg.get("partial_rotary_factor", 0.25)) if bf_next(cfg) else hd


def bf_sparse(cfg, layer):
    arch = cfg["architectures"][0]
    if arch not in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "Qwen3NextForCausalLM"):
        return False
    step, dense = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers") or []
    n = cfg.get("num_experts", 512 if bf_next(cfg) else 128)
    return layer not in dense and n > 0 and (layer + 1) % step == 0


def bf_experts(cfg, proj, p, hn, top_k=None):
    """Mixture of experts for one position: the router's softmax, experts sorted by probability."""
    logits = proj("mlp.gate", hn)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    k = top_k or cfg.get("num_experts_per_tok", 10 if bf_next(cfg) else 8)
    chosen = sorted(range(len(probs)), key=lambda e: -probs[e])[:k]
    weights = np.array([probs[e] for e in chosen])
    if cfg.get("norm_topk_prob", bf_next(cfg)):
        weights = weights / weights.sum()
    out = np.zeros_like(hn)
    for w, e in zip(weights, chosen):
        gate, up = proj(f"mlp.experts.{e}.gate_proj", hn), proj(f"mlp.experts.{e}.up_proj", hn)
        out += w * proj(f"mlp.experts.{e}.down_proj", gate / (1 + np.exp(-gate)) * up)
    if cfg["architectures"][0] in ("Qwen2MoeForCausalLM", "Qwen3NextForCausalLM"):
        gate, up = proj("mlp.shared_expert.gate_proj", hn), proj("mlp.shared_expert.up_proj", hn)
        shared = proj("mlp.shared_expert.down_proj", gate / (1 + np.exp(-gate)) * up)
        out += shared / (1 + np.exp(-proj("mlp.shared_expert_gate", hn)[0]))
    return out


def bf_silu(v):
    return v / (1 + np.exp(-v))


def bf_deltanet(cfg, W, p, xn, eps, state=None, conv="all", kmap="div", layout="grouped"):
    """Qwen3-Next gated DeltaNet over the normed inputs xn (list of [H]); returns a list of [H].

    state=N resets the recurrent state before every position that is a multiple of N (None: never);
    conv="last" keeps only the tap on the current token; kmap="mod" reads key head h % nk;
    layout="flat" reads in_proj_qkvz / in_proj_ba as [q | k | v | z] / [b | a] blocks."""
    nk, nv = cfg.get("linear_num_key_heads", 16), cfg.get("linear_num_value_heads", 32)
    dk, dv = cfg.get("linear_key_head_dim", 128), cfg.get("linear_value_head_dim", 128)
    taps = cfg.get("linear_conv_kernel_dim", 4)
    r, t = nv // nk, len(xn)
    a_ = p + "linear_attn."
    channels, zs, bs, as_ = [], [], [], []
    for pos in range(t):
        y = W[a_ + "in_proj_qkvz.weight"] @ xn[pos]
        ba = W[a_ + "in_proj_ba.weight"] @ xn[pos]
        q, k = np.zeros((nk, dk)), np.zeros((nk, dk))
        v, z, b, a = np.zeros((nv, dv)), np.zeros((nv, dv)), np.zeros(nv), np.zeros(nv)
        width = 2 * dk + 2 * r * dv  # one key head's group
        for g in range(nk):
            if layout == "grouped":
                o = g * width
                q[g], k[g] = y[o:o + dk], y[o + dk:o + 2 * dk]
            else:
                q[g], k[g] = y[g * dk:(g + 1) * dk], y[nk * dk + g * dk:nk * dk + (g + 1) * dk]
            for j in range(r):
                h = g * r + j
                if layout == "grouped":
                    v[h] = y[o + 2 * dk + j * dv:o + 2 * dk + (j + 1) * dv]
                    z[h] = y[o + 2 * dk + r * dv + j * dv:o + 2 * dk + r * dv + (j + 1) * dv]
                    b[h], a[h] = ba[g * 2 * r + j], ba[g * 2 * r + r + j]
                else:
                    v[h] = y[2 * nk * dk + h * dv:2 * nk * dk + (h + 1) * dv]
                    z[h] = y[2 * nk * dk + nv * dv + h * dv:2 * nk * dk + nv * dv + (h + 1) * dv]
                    b[h], a[h] = ba[h], ba[nv + h]
        channels.append(np.concatenate([q.ravel(), k.ravel(), v.ravel()]))
        zs.append(z)
        bs.append(b)
        as_.append(a)
    w = W[a_ + "conv1d.weight"]  # [channels, 1, taps]
    conved = []
    for pos in range(t):
        c_out = np.zeros(len(channels[0]))
        for c in range(len(c_out)):
            acc = 0.0
            for j in range(taps):
                src = pos - (taps - 1) + j
                if src >= 0 and (conv == "all" or j == taps - 1):
                    acc += w[c, 0, j] * channels[src][c]
            c_out[c] = acc / (1 + math.exp(-acc))
        conved.append(c_out)
    outs = [np.zeros((nv, dv)) for _ in range(t)]
    for h in range(nv):
        kh = h // r if kmap == "div" else h % nk
        big_a = math.exp(W[a_ + "A_log"][h])
        S = np.zeros((dk, dv))
        for pos in range(t):
            c = conved[pos]
            q = c[kh * dk:(kh + 1) * dk]
            k = c[nk * dk + kh * dk:nk * dk + (kh + 1) * dk]
            v = c[2 * nk * dk + h * dv:2 * nk * dk + (h + 1) * dv]
            q = q / math.sqrt(q @ q + 1e-6) / math.sqrt(dk)
            k = k / math.sqrt(k @ k + 1e-6)
            beta = 1 / (1 + math.exp(-bs[pos][h]))
            decay = math.exp(-big_a * np.logaddexp(0.0, as_[pos][h] + W[a_ + "dt_bias"][h]))
            if state is not None and pos % state == 0:
                S = np.zeros((dk, dv))
            S = S * decay
            remembered = np.array([sum(k[i] * S[i, jv] for i in range(dk)) for jv in range(dv)])
            delta = (v - remembered) * beta
            S = S + np.outer(k, delta)
            outs[pos][h] = np.array([sum(q[i] * S[i, jv] for i in range(dk)) for jv in range(dv)])
    result = []
    for pos in range(t):
        y = np.concatenate([bf_rms(outs[pos][h], W[a_ + "norm.weight"], eps) * bf_silu(zs[pos][h])
                            for h in range(nv)])
        result.append(W[a_ + "out_proj.weight"] @ y)
    return result


def bf_attention(m, W, layer, proj, xn, gqa="div", window="config", gate=True, rotary="config"):
    """Softmax attention over the normed inputs xn; Qwen3-Next: its [query | gate] q_proj, (1 + w)
    q/k norms, partial RoPE (rotary="full": all of head_dim) and sigmoid output gate (gate=False: none)."""
    cfg, eps = m.config, m.eps
    p = f"model.layers.{layer}."
    nh, nkv, hd = m.n_heads, m.n_kv_heads, m.head_dim
    g = nh // nkv
    win = bf_window(cfg, layer) if window == "config" else None
    rot = bf_rotary_dim(cfg, hd) if rotary == "config" else hd
    inv = bf_inv_freq(cfg, rot)
    t = len(xn)
    if bf_next(cfg):
        qg = [proj("self_attn.q_proj", v).reshape(nh, 2 * hd) for v in xn]
        q, gates = [r[:, :hd] for r in qg], [r[:, hd:] for r in qg]
    else:
        q = [proj("self_attn.q_proj", v).reshape(nh, hd) for v in xn]
    k = [proj("self_attn.k_proj", v).reshape(nkv, hd) for v in xn]
    v = [proj("self_attn.v_proj", u).reshape(nkv, hd) for u in xn]
    if p + "self_attn.q_norm.weight" in W:
        qw, kw = (bf_norm_w(cfg, W[p + f"self_attn.{x}_norm.weight"]) for x in "qk")
        q = [np.stack([bf_rms(r, qw, eps) for r in qi]) for qi in q]
        k = [np.stack([bf_rms(r, kw, eps) for r in ki]) for ki in k]
    q = [np.stack([bf_rope(r, pos, inv) for r in q[pos]]) for pos in range(t)]
    k = [np.stack([bf_rope(r, pos, inv) for r in k[pos]]) for pos in range(t)]
    out = []
    for pos in range(t):
        heads = []
        for h in range(nh):
            j = h // g if gqa == "div" else h % nkv
            keys = [kp for kp in range(pos + 1) if win is None or pos - kp < win]
            scores = np.array([q[pos][h] @ k[kp][j] / math.sqrt(hd) for kp in keys])
            e = np.exp(scores - scores.max())
            a = e / e.sum()
            head = sum(a[n] * v[kp][j] for n, kp in enumerate(keys))
            if bf_next(cfg) and gate:
                head = head / (1 + np.exp(-gates[pos][h]))
            heads.append(head)
        out.append(proj("self_attn.o_proj", np.concatenate(heads)))
    return out


def bf_layer(m, W, layer, x, gqa="div", window="config", top_k=None, state=None, conv="all", kmap="div",
             layout="grouped", gate=True, rotary="config"):
    """One decoder layer, loops over positions and heads. x: numpy [T, H]."""
    cfg, eps = m.config, m.eps
    p = f"model.layers.{layer}."
    t = x.shape[0]

    def proj(name, v):
        y = W[p + name + ".weight"] @ v
        return y + W[p + name + ".bias"] if p + name + ".bias" in W else y

    xn = [bf_rms(x[i], bf_norm_w(cfg, W[p + "input_layernorm.weight"]), eps) for i in range(t)]
    if bf_layer_type(cfg, layer) == "linear_attention":
        mixed = bf_deltanet(cfg, W, p, xn, eps, state, conv, kmap, layout)
    else:
        mixed = bf_attention(m, W, layer, proj, xn, gqa, window, gate, rotary)
    out = np.zeros((t, x.shape[1]))
    for pos in range(t):
        h1 = x[pos] + mixed[pos]
        hn = bf_rms(h1, bf_norm_w(cfg, W[p + "post_attention_layernorm.weight"]), eps)
        if bf_sparse(cfg, layer):
            out[pos] = h1 + bf_experts(cfg, proj, p, hn, top_k)
            continue
        gate_, up = proj("mlp.gate_proj", hn), proj("mlp.up_proj", hn)
        out[pos] = h1 + proj("mlp.down_proj", gate_ / (1 + np.exp(-gate_)) * up)
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
            normed = np.stack([bf_rms(r, bf_norm_w(m.config, W["model.norm.weight"]), m.eps) for r in bf])
            diff = np.abs(normed - states[-1]).max()
        assert diff < TOL, f"layer {i}: brute force differs by {diff}"
    return W, states


def check_sensitivity(m, W, states):
    """The brute force (and so the check) would notice a wrong GQA map or window, and so on."""
    notes = []
    cfg = m.config
    first_full = next(i for i in range(m.n_layers) if bf_layer_type(cfg, i) == "full_attention")
    if m.n_heads != m.n_kv_heads and m.n_kv_heads > 1:
        wrong = bf_layer(m, W, first_full, states[first_full], gqa="mod")
        right = bf_layer(m, W, first_full, states[first_full])
        assert np.abs(wrong - right).max() > 1e-3, "GQA mapping does not matter?"
        notes.append("gqa-map")
    for i in range(m.n_layers if bf_next(cfg) else 0):
        right = bf_layer(m, W, i, states[i])
        if bf_layer_type(cfg, i) == "linear_attention":
            variants = {"state": {"state": 1}, "state8": {"state": 8}, "conv": {"conv": "last"},
                        "qkvz-layout": {"layout": "flat"}}
            if cfg["linear_num_value_heads"] != cfg["linear_num_key_heads"]:
                variants["vk-map"] = {"kmap": "mod"}
        else:
            variants = {"gate": {"gate": False}, "partial-rope": {"rotary": "full"}}
        for label, kwargs in variants.items():
            diff = np.abs(bf_layer(m, W, i, states[i], **kwargs) - right).max()
            assert diff > 1e-3, f"layer {i}: {label} does not matter ({diff})"
            notes.append(f"{label}@{i}")
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
    if name in ("qwen3-next-f32", "qwen3-next-bf16"):
        lin, full = "linear_attention", "full_attention"
        f32 = name == "qwen3-next-f32"
        assert m.mixers == ([lin, full, lin, full] if f32 else [lin, lin, full]), m.mixers
        assert m.sparse == ([True, False, True, True] if f32 else [True, True, True]), m.sparse
        assert m.rotary_dim == 8 and len(m.inv_freq) == 4 and m.head_dim == (16 if f32 else 32)
        assert m.shared_expert and m.zero_centred and m.attn_gate and m.norm_topk_prob == f32
        assert (m.lin_k_heads, m.lin_v_heads, m.lin_k_dim, m.lin_v_dim, m.conv_kernel) == \
            ((2, 4, 16, 8, 4) if f32 else (2, 2, 8, 16, 3))
        return f"layers {''.join(t[0].upper() for t in m.mixers)}, rotary {m.rotary_dim}/{m.head_dim}"
    if name == "llama3-bf16":
        base = ref.rope_inv_freq(m.head_dim, m.config["rope_theta"], None)
        ratio = (m.inv_freq / base).tolist()
        kept = sum(abs(x - 1) < 1e-12 for x in ratio)
        divided = sum(abs(x - 1 / 8) < 1e-12 for x in ratio)
        assert kept >= 1 and divided >= 1 and kept + divided < len(ratio), ratio
        return f"llama3 freqs kept/smoothed/divided = {kept}/{len(ratio) - kept - divided}/{divided}"
    return ""


def check_rejects_mtp(directory):
    """A Qwen3-Next checkpoint with multi-token-prediction tensors is an error, not ignored."""
    cfg = json.load(open(os.path.join(directory, "config.json")))
    stored = ref.read_model_dir(directory)
    stored["mtp.fc.weight"] = torch.zeros(cfg["hidden_size"], 2 * cfg["hidden_size"])
    try:
        ref.build_model(cfg, stored)
    except ValueError:
        return
    raise AssertionError("mtp.* tensors were accepted")


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
            if bf_next(m.config):
                check_rejects_mtp(directory)
            check_cli(directory, r)
            print(f"{name:24s} ok  {' '.join(notes)} {extra}")


if __name__ == "__main__":
    main()
