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
  Dense Qwen3.5 goes through the same brute force, its DeltaNet reading the four separate projections
  (in_proj_qkv / _z / _b / _a) on their own (bf_split_inputs); the check notices Qwen3-Next's grouped
  reading of in_proj_qkv and b / a swapped. check_qwen35_tiny (a random tiny model) adds the loader's
  refusals (num_experts > 0, a missing in_proj_z, fused names, bad shapes, mrope_section, ...), the
  multimodal layout and the legacy RoPE keys giving the same model; on the fixtures, qwen35-f32's
  rope_parameters are read (and its mrope keys do not matter), and qwen35-bf16's config nests the text
  keys in text_config and its model.visual.* tensors are in the file and ignored.
  For Nemotron-H (fixtures and a random tiny model) the brute force is bf_nemotron_layer: the conv
  tap by tap, the SSD in its quadratic "dual" form (bf_ssd_dual, also checked on random inputs
  against nemotron_h_ref.ssm_scan's token-by-token recurrence to 1e-10), the grouped gated RMSNorm,
  attention without RoPE, relu2 MLPs; its sensitivity to state resets, the conv's taps, the D skip,
  the gate/norm order, the head->group map and norm groups, the dt clamp, RoPE, the GQA map and
  relu vs relu2; and the loader's refusals ('E' blocks, mlp_hidden_act, in_proj biases, a missing
  or an unexpected tensor).
  Medusa heads are checked by test_medusa_ref.py.

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


def bf_rope_key(cfg, key, default):
    """Qwen3.5 may keep rope_theta / partial_rotary_factor in rope_parameters."""
    params = (cfg.get("rope_parameters") or {}) if bf_qwen35(cfg) else {}
    return params[key] if key in params else cfg.get(key, default)


def bf_inv_freq(cfg, hd):
    theta = float(bf_rope_key(cfg, "rope_theta", 10000.0))
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


def bf_qwen35(cfg):
    return cfg["architectures"][0] in ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")


def bf_next(cfg):
    """Qwen3-Next and dense Qwen3.5: hybrid layers, zero-centred norms, gated attention."""
    return cfg["architectures"][0] == "Qwen3NextForCausalLM" or bf_qwen35(cfg)


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
    return int(hd * bf_rope_key(cfg, "partial_rotary_factor", 0.25)) if bf_next(cfg) else hd


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


def bf_split_inputs(W, a_, x, nk, nv, dk, dv, layout):
    """Qwen3.5's four projections of one position, each read on its own: q, k [nk, dk], v, z [nv, dv],
    b, a [nv]. in_proj_qkv = [q | k | v] with heads in order; in_proj_z / _b / _a are per value head.
    layout="split-grouped" reads in_proj_qkv as Qwen3-Next's nk groups [q_g | k_g | v_g] instead, and
    layout="split-ba" swaps in_proj_b and in_proj_a (mistakes the check must notice)."""
    y, zz = W[a_ + "in_proj_qkv.weight"] @ x, W[a_ + "in_proj_z.weight"] @ x
    bb, aa = W[a_ + "in_proj_b.weight"] @ x, W[a_ + "in_proj_a.weight"] @ x
    if layout == "split-ba":
        bb, aa = aa, bb
    r = nv // nk
    q, k, v, z = np.zeros((nk, dk)), np.zeros((nk, dk)), np.zeros((nv, dv)), np.zeros((nv, dv))
    for g in range(nk):
        o = g * (2 * dk + r * dv)
        q[g] = y[o:o + dk] if layout == "split-grouped" else y[g * dk:(g + 1) * dk]
        k[g] = y[o + dk:o + 2 * dk] if layout == "split-grouped" else y[nk * dk + g * dk:nk * dk + (g + 1) * dk]
    for h in range(nv):
        o = (h // r) * (2 * dk + r * dv) + 2 * dk + (h % r) * dv
        v[h] = y[o:o + dv] if layout == "split-grouped" else y[2 * nk * dk + h * dv:2 * nk * dk + (h + 1) * dv]
        z[h] = zz[h * dv:(h + 1) * dv]
    return q, k, v, z, np.array([bb[h] for h in range(nv)]), np.array([aa[h] for h in range(nv)])


def bf_deltanet(cfg, W, p, xn, eps, state=None, conv="all", kmap="div", layout=None):
    """Qwen3-Next / Qwen3.5 gated DeltaNet over the normed inputs xn (list of [H]); returns a list of [H].

    state=N resets the recurrent state before every position that is a multiple of N (None: never);
    conv="last" keeps only the tap on the current token; kmap="mod" reads key head h % nk;
    layout (default "grouped" for Qwen3-Next, "split" for Qwen3.5): "flat" reads in_proj_qkvz /
    in_proj_ba as [q | k | v | z] / [b | a] blocks; "split*": see bf_split_inputs."""
    layout = layout or ("split" if bf_qwen35(cfg) else "grouped")
    nk, nv = cfg.get("linear_num_key_heads", 16), cfg.get("linear_num_value_heads", 32)
    dk, dv = cfg.get("linear_key_head_dim", 128), cfg.get("linear_value_head_dim", 128)
    taps = cfg.get("linear_conv_kernel_dim", 4)
    r, t = nv // nk, len(xn)
    a_ = p + "linear_attn."
    channels, zs, bs, as_ = [], [], [], []
    for pos in range(t):
        if layout.startswith("split"):
            q, k, v, z, b, a = bf_split_inputs(W, a_, xn[pos], nk, nv, dk, dv, layout)
            channels.append(np.concatenate([q.ravel(), k.ravel(), v.ravel()]))
            zs.append(z)
            bs.append(b)
            as_.append(a)
            continue
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
             layout=None, gate=True, rotary="config"):
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


# ----------------------------------------------------------------------------- Nemotron-H brute force


def bf_nemotron(cfg):
    return cfg["architectures"][0] == "NemotronHForCausalLM"


def bf_ssd_dual(x, dt, A, B, C, D, gmap="div", reset=None):
    """Mamba-2's SSD in its "dual", attention-like quadratic form, per head h (group g of B/C):
      y[t, h] = sum_{s <= t} (C[t, g] . B[s, g]) exp(A[h] sum_{r = s+1..t} dt[r, h]) dt[s, h] x[s, h]
                + D[h] x[t, h].
    x [T, nh, P], dt [T, nh], A [nh], B/C [T, G, N], D [nh] (numpy). gmap="mod" reads group h % G;
    reset=N forgets everything before the last multiple of N (a state reset every N tokens)."""
    t_len, nh, _ = x.shape
    groups = B.shape[1]
    y = np.zeros_like(x)
    for h in range(nh):
        g = h // (nh // groups) if gmap == "div" else h % groups
        for t in range(t_len):
            first = 0 if reset is None else t - t % reset
            acc = D[h] * x[t, h]
            for s in range(first, t + 1):
                decay = math.exp(A[h] * sum(dt[r, h] for r in range(s + 1, t + 1)))
                acc = acc + (C[t, g] @ B[s, g]) * decay * dt[s, h] * x[s, h]
            y[t, h] = acc
    return y


def bf_mamba2(cfg, W, p, xn, eps, state=None, conv="all", gmap="div", norm_groups="config", gate="first",
              clamp=True, skip=True):
    """Nemotron-H's Mamba-2 mixer over the normed inputs xn (list of [H]), position by position.

    Variants the check must notice: state=N (reset every N tokens), conv="last" (current tap only),
    gmap="mod" (head h reads group h % G), norm_groups=1 (one RMS over all channels), gate="last"
    (RMSNorm before the silu(z) gate), clamp=False (time_step_limit ignored), skip=False (no D)."""
    nh, hp, n = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"]
    groups, taps = cfg["n_groups"], cfg["conv_kernel"]
    inner = nh * hp
    conv_dim = inner + 2 * groups * n
    lo, hi = cfg.get("time_step_limit", [0.0, math.inf])
    a_ = p + "mixer."
    t_len = len(xn)
    rows = [W[a_ + "in_proj.weight"] @ v for v in xn]
    zs = [r[:inner] for r in rows]
    w = W[a_ + "conv1d.weight"]
    bias = W.get(a_ + "conv1d.bias")
    x, B, C = np.zeros((t_len, nh, hp)), np.zeros((t_len, groups, n)), np.zeros((t_len, groups, n))
    dt = np.zeros((t_len, nh))
    for pos in range(t_len):
        c_out = np.zeros(conv_dim)
        for c in range(conv_dim):
            acc = 0.0 if bias is None else bias[c]
            for j in range(taps):
                src = pos - (taps - 1) + j
                if src >= 0 and (conv == "all" or j == taps - 1):
                    acc += w[c, 0, j] * rows[src][inner + c]
            c_out[c] = bf_silu(acc)
        x[pos] = c_out[:inner].reshape(nh, hp)
        B[pos] = c_out[inner:inner + groups * n].reshape(groups, n)
        C[pos] = c_out[inner + groups * n:].reshape(groups, n)
        for h in range(nh):
            d = np.logaddexp(0.0, rows[pos][inner + conv_dim + h] + W[a_ + "dt_bias"][h])  # softplus
            dt[pos, h] = min(max(d, lo), hi) if clamp else d
    A = -np.exp(W[a_ + "A_log"])
    D = W[a_ + "D"] if skip else np.zeros(nh)
    y = bf_ssd_dual(x, dt, A, B, C, D, gmap, state)
    n_norm = groups if norm_groups == "config" else norm_groups
    out = []
    for pos in range(t_len):
        flat, gate_ = y[pos].reshape(inner), bf_silu(zs[pos])
        u = flat * gate_ if gate == "first" else flat
        size = inner // n_norm
        normed = np.concatenate([u[k * size:(k + 1) * size] / math.sqrt(np.mean(u[k * size:(k + 1) * size] ** 2) + eps)
                                 for k in range(n_norm)]) * W[a_ + "norm.weight"]
        if gate != "first":
            normed = normed * gate_
        out.append(W[a_ + "out_proj.weight"] @ normed)
    return out


def bf_nemotron_attention(cfg, proj, xn, gqa="div", rope=False):
    """Causal softmax attention without positional encoding (rope=True: with RoPE, theta 1e4)."""
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg.get("attention_head_dim") or cfg["hidden_size"] // nh
    g = nh // nkv
    t_len = len(xn)
    q = [proj("q_proj", v).reshape(nh, hd) for v in xn]
    k = [proj("k_proj", v).reshape(nkv, hd) for v in xn]
    v = [proj("v_proj", u).reshape(nkv, hd) for u in xn]
    if rope:
        inv = 10000.0 ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        q = [np.stack([bf_rope(r, pos, inv) for r in q[pos]]) for pos in range(t_len)]
        k = [np.stack([bf_rope(r, pos, inv) for r in k[pos]]) for pos in range(t_len)]
    out = []
    for pos in range(t_len):
        heads = []
        for h in range(nh):
            j = h // g if gqa == "div" else h % nkv
            scores = np.array([q[pos][h] @ k[kp][j] / math.sqrt(hd) for kp in range(pos + 1)])
            e = np.exp(scores - scores.max())
            a = e / e.sum()
            heads.append(sum(a[kp] * v[kp][j] for kp in range(pos + 1)))
        out.append(proj("o_proj", np.concatenate(heads)))
    return out


def bf_nemotron_layer(m, W, layer, x, gqa="div", rope=False, square=True, **mamba):
    """One Nemotron-H block, x + mixer(rms_norm(x)): Mamba-2, attention or relu2 MLP (square=False:
    plain relu). x: numpy [T, H]."""
    cfg = m.config
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    p = f"backbone.layers.{layer}."
    kind = cfg["hybrid_override_pattern"][layer]

    def proj(name, v):
        y = W[p + "mixer." + name + ".weight"] @ v
        return y + W[p + "mixer." + name + ".bias"] if p + "mixer." + name + ".bias" in W else y

    xn = [bf_rms(x[i], W[p + "norm.weight"], eps) for i in range(x.shape[0])]
    if kind == "M":
        mixed = bf_mamba2(cfg, W, p, xn, eps, **mamba)
    elif kind == "*":
        mixed = bf_nemotron_attention(cfg, proj, xn, gqa, rope)
    else:
        mixed = [proj("down_proj", np.maximum(proj("up_proj", v), 0.0) ** (2 if square else 1)) for v in xn]
    return x + np.stack(mixed)


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
    assert len(states) == m.n_layers + 1, len(states)
    nemotron = bf_nemotron(m.config)
    final = "backbone.norm_f.weight" if nemotron else "model.norm.weight"
    for i in range(m.n_layers):
        bf = bf_nemotron_layer(m, W, i, states[i]) if nemotron else bf_layer(m, W, i, states[i])
        if i + 1 < m.n_layers:
            diff = np.abs(bf - states[i + 1]).max()
        else:
            normed = np.stack([bf_rms(r, bf_norm_w(m.config, W[final]), m.eps) for r in bf])
            diff = np.abs(normed - states[-1]).max()
        assert diff < TOL, f"layer {i}: brute force differs by {diff}"
    return W, states


def check_sensitivity(m, W, states):
    """The brute force (and so the check) would notice a wrong GQA map or window, and so on."""
    notes = []
    cfg = m.config
    if bf_nemotron(cfg):
        return check_nemotron_sensitivity(m, W, states)
    first_full = next(i for i in range(m.n_layers) if bf_layer_type(cfg, i) == "full_attention")
    if m.n_heads != m.n_kv_heads and m.n_kv_heads > 1:
        wrong = bf_layer(m, W, first_full, states[first_full], gqa="mod")
        right = bf_layer(m, W, first_full, states[first_full])
        assert np.abs(wrong - right).max() > 1e-3, "GQA mapping does not matter?"
        notes.append("gqa-map")
    for i in range(m.n_layers if bf_next(cfg) else 0):
        right = bf_layer(m, W, i, states[i])
        if bf_layer_type(cfg, i) == "linear_attention":
            variants = {"state": {"state": 1}, "state8": {"state": 8}, "conv": {"conv": "last"}}
            if bf_qwen35(cfg):
                variants.update({"qkv-layout": {"layout": "split-grouped"}, "b-a": {"layout": "split-ba"}})
            else:
                variants["qkvz-layout"] = {"layout": "flat"}
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


def check_nemotron_sensitivity(m, W, states):
    """Per block, each mistake the Nemotron-H brute force must notice changes that block's output."""
    cfg, notes = m.config, []
    lo, hi = cfg.get("time_step_limit", [0.0, math.inf])
    for i, kind in enumerate(cfg["hybrid_override_pattern"]):
        if kind == "M":
            variants = {"state": {"state": 1}, "state8": {"state": 8}, "conv": {"conv": "last"},
                        "D": {"skip": False}, "gate-order": {"gate": "last"}}
            if cfg["n_groups"] > 1:
                variants.update({"group-map": {"gmap": "mod"}, "norm-groups": {"norm_groups": 1}})
            if lo > 0 or math.isfinite(hi):
                variants["dt-clamp"] = {"clamp": False}
        elif kind == "*":
            variants = {"rope": {"rope": True}}
            if m.n_kv_heads > 1 and m.n_heads != m.n_kv_heads:
                variants["gqa-map"] = {"gqa": "mod"}
        else:
            variants = {"relu2": {"square": False}}
        right = bf_nemotron_layer(m, W, i, states[i])
        for label, kwargs in variants.items():
            diff = np.abs(bf_nemotron_layer(m, W, i, states[i], **kwargs) - right).max()
            assert diff > 1e-3, f"block {i}: {label} does not matter ({diff})"
            notes.append(f"{label}@{i}")
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
    if name in ("qwen35-f32", "qwen35-bf16"):
        lin, full = "linear_attention", "full_attention"
        f32 = name == "qwen35-f32"
        assert m.mixers == ([lin, lin, lin, full] if f32 else [lin, lin, full]), m.mixers
        assert m.sparse == [False] * m.n_layers and m.n_experts == 0 and not m.shared_expert
        assert m.split_proj and m.zero_centred and m.attn_gate and m.qk_norm
        assert m.rotary_dim == 8 and m.head_dim == (16 if f32 else 32) and m.n_kv_heads == (2 if f32 else 1)
        theta = 1e7 if f32 else 1e4  # rope_parameters' / the (text_config's) top-level rope_theta
        want = theta ** (-np.arange(0, 8, 2, dtype=np.float64) / 8)
        assert np.allclose(m.inv_freq.numpy(), want, rtol=1e-13, atol=0), (m.inv_freq, want)
        assert (m.lin_k_heads, m.lin_v_heads, m.lin_k_dim, m.lin_v_dim, m.conv_kernel) == \
            ((2, 4, 16, 8, 4) if f32 else (2, 2, 8, 16, 3))
        assert torch.equal(m.weights["lm_head.weight"], m.weights["model.embed_tokens.weight"]) != f32
        return f"layers {''.join(t[0].upper() for t in m.mixers)}, rotary {m.rotary_dim}/{m.head_dim}, theta {theta:g}"
    if name in ("nemotron-h-f32", "nemotron-h-bf16"):
        f32 = name == "nemotron-h-f32"
        assert m.pattern == ("M-*M-M" if f32 else "M*M-M"), m.pattern
        assert (m.head_dim, m.n_heads, m.n_kv_heads) == ((16, 4, 2) if f32 else (12, 4, 1))
        assert ("attention_head_dim" in m.config) == f32 and ("head_dim" in m.config) != f32
        assert (m.m_heads, m.m_head_dim, m.state_size, m.n_groups, m.conv_kernel, m.conv_bias) == \
            ((8, 8, 16, 2, 4, True) if f32 else (4, 12, 8, 1, 3, False))
        assert m.dt_limit == ((0.0, math.inf) if f32 else (0.0, 0.5)), m.dt_limit
        assert m.eps == (1e-5 if f32 else 1e-6)
        return f"blocks {m.pattern}, time_step_limit {list(m.dt_limit)}"
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
    hidden = cfg.get("text_config", cfg)["hidden_size"]
    stored["mtp.fc.weight"] = torch.zeros(hidden, 2 * hidden)
    try:
        ref.build_model(cfg, stored)
    except ValueError:
        return
    raise AssertionError("mtp.* tensors were accepted")


def expect_refusal(cfg, tensors, *words):
    """ref.build_model refuses (cfg, tensors) with a ValueError whose message has every one of words."""
    try:
        ref.build_model(cfg, tensors)
    except ValueError as e:
        assert all(w in str(e) for w in words), (words, str(e))
        return
    raise AssertionError(f"accepted; expected a ValueError mentioning {words}")


def check_qwen35_rope(directory, m, prompt):
    """qwen35-f32 gives rope_theta / partial_rotary_factor only in rope_parameters: they are read from
    there, and its mrope keys do not change the text model."""
    raw = json.load(open(os.path.join(directory, "config.json")))
    assert "rope_theta" not in raw and "partial_rotary_factor" not in raw and "rope_scaling" not in raw, raw
    assert raw["rope_parameters"]["mrope_section"] == [2, 1, 1] and raw["rope_parameters"]["mrope_interleaved"]
    stored = ref.read_model_dir(directory)
    base = ref.forward(m, prompt)
    plain = {k: v for k, v in raw["rope_parameters"].items() if not k.startswith("mrope")}
    same = ref.build_model(dict(raw, rope_parameters=plain), stored)
    assert torch.equal(ref.forward(same, prompt), base), "mrope keys changed the text model"
    legacy = dict({k: v for k, v in raw.items() if k != "rope_parameters"}, rope_theta=1e7, partial_rotary_factor=0.5,
                  rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    assert torch.equal(ref.forward(ref.build_model(legacy, stored), prompt), base), "legacy rope keys differ"
    dropped = ref.build_model({k: v for k, v in raw.items() if k != "rope_parameters"}, stored)
    assert dropped.rotary_dim == 4 and (ref.forward(dropped, prompt) - base).abs().max() > 1e-3


def check_qwen35_multimodal(directory, m, prompt):
    """qwen35-bf16 (Qwen3_5ForConditionalGeneration): config.json really nests the text keys under
    text_config, the file really holds model.language_model.* and model.visual.* tensors, and the
    text model ignores the vision tensors (and nothing else)."""
    raw = json.load(open(os.path.join(directory, "config.json")))
    text = raw["text_config"]
    assert raw["architectures"] == ["Qwen3_5ForConditionalGeneration"] and raw["model_type"] == "qwen3_5"
    assert text["model_type"] == "qwen3_5_text" and "vision_config" in raw
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "vocab_size", "intermediate_size", "full_attention_interval", "linear_num_key_heads",
                "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
                "rope_theta", "partial_rotary_factor", "rope_scaling", "rms_norm_eps", "eos_token_id"):
        assert key in text and key not in raw, key
    assert "tie_word_embeddings" in raw and "tie_word_embeddings" not in text and "layer_types" not in text
    # the reference's text config is text_config plus the top level's architectures / tie_word_embeddings
    assert m.config == dict(text, architectures=raw["architectures"], tie_word_embeddings=raw["tie_word_embeddings"])
    stored = ref.read_model_dir(directory)
    visual = sorted(n for n in stored if n.startswith("model.visual."))
    assert visual == ["model.visual.blocks.0.norm1.weight", "model.visual.patch_embed.proj.weight"], visual
    assert [list(stored[n].shape) for n in visual] == [[8], [8, 3]]
    lm = "model.language_model."
    assert all(n.startswith((lm, "model.visual.")) for n in stored), sorted(stored)  # tied: no lm_head.weight
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in stored
    assert sorted(m.weights) == sorted(["model." + n[len(lm):] for n in stored if n.startswith(lm)] + ["lm_head.weight"])
    base = ref.forward(m, prompt)
    text_only = {n: t for n, t in stored.items() if n not in visual}
    assert torch.equal(ref.forward(ref.build_model(raw, text_only), prompt), base)
    changed = dict(stored, **{n: stored[n] + 1.0 for n in visual})
    assert torch.equal(ref.forward(ref.build_model(raw, changed), prompt), base)
    flat = dict(text, architectures=["Qwen3_5ForCausalLM"], tie_word_embeddings=True)  # the text-only layout
    renamed = {"model." + n[len(lm):]: t for n, t in text_only.items()}
    assert torch.equal(ref.forward(ref.build_model(flat, renamed), prompt), base)
    expect_refusal(raw, dict(stored, **{"model.vision_tower.w": torch.zeros(2)}), "unexpected", "model.vision_tower.w")
    expect_refusal(raw, dict(stored, **{lm + "layers.0.mlp.gate.weight": torch.zeros(2, 48)}),
                   "unexpected", "model.language_model.", "layers.0.mlp.gate.weight")
    expect_refusal(dict(raw, text_config=dict(text, tie_word_embeddings=False)), stored, "tie_word_embeddings")


def tiny_qwen35(**overrides):
    """A random float64 dense Qwen3.5 (config, tensors), text-only layout: DeltaNet with 3 value heads per
    key head and dk != dv, conv kernel 2, RoPE on half of each head from rope_parameters."""
    cfg = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": 16,
           "vocab_size": 23, "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 8, "intermediate_size": 24,
           "layer_types": ["linear_attention", "full_attention", "linear_attention"],
           "linear_num_key_heads": 2, "linear_num_value_heads": 6, "linear_key_head_dim": 3,
           "linear_value_head_dim": 5, "linear_conv_kernel_dim": 2, "rms_norm_eps": 1e-6,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5,
                               "mrope_section": [1, 1, 0], "mrope_interleaved": True},
           "tie_word_embeddings": False}
    cfg.update(overrides)
    h, v = 16, 23
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                       p + "mlp.gate_proj.weight": [24, h], p + "mlp.up_proj.weight": [24, h],
                       p + "mlp.down_proj.weight": [h, 24]})
        if kind == "linear_attention":
            a = p + "linear_attn."
            shapes.update({a + "in_proj_qkv.weight": [2 * 2 * 3 + 6 * 5, h], a + "in_proj_z.weight": [6 * 5, h],
                           a + "in_proj_b.weight": [6, h], a + "in_proj_a.weight": [6, h],
                           a + "conv1d.weight": [2 * 2 * 3 + 6 * 5, 1, 2], a + "A_log": [6], a + "dt_bias": [6],
                           a + "norm.weight": [5], a + "out_proj.weight": [h, 6 * 5]})
        else:
            a = p + "self_attn."
            shapes.update({a + "q_proj.weight": [2 * 2 * 8, h], a + "k_proj.weight": [8, h],
                           a + "v_proj.weight": [8, h], a + "o_proj.weight": [h, 2 * 8],
                           a + "q_norm.weight": [8], a + "k_norm.weight": [8]})
    gen = torch.Generator().manual_seed(35)
    tensors = {name: torch.randn(shape, generator=gen, dtype=torch.float64) / (shape[-1] ** 0.5 if len(shape) > 1
                                                                               else 2.0)
               for name, shape in shapes.items()}
    return cfg, tensors


def check_qwen35_tiny():
    """On a random tiny Qwen3.5: the brute force (the four projections read separately), its sensitivity,
    the loader's refusals, the multimodal layout and the legacy RoPE keys giving the same model."""
    cfg, tensors = tiny_qwen35()
    m = ref.build_model(cfg, tensors, [2])
    assert m.split_proj and m.rotary_dim == 4 and m.sparse == [False] * 3 and m.mixers[1] == "full_attention"
    prompt = [3, 7, 1, 22, 5, 5, 9, 14, 0, 2, 18, 6, 11, 4]
    check_causality(m, prompt)
    W, states = check_layers(m, prompt)
    notes = check_sensitivity(m, W, states)
    assert {"qkv-layout@0", "b-a@0", "vk-map@2", "gate@1", "partial-rope@1"} <= set(notes), notes
    base = ref.forward(m, prompt)
    expect_refusal(dict(cfg, num_experts=4, num_experts_per_tok=2), tensors, "num_experts=4", "Qwen3_5MoeForCausalLM")
    z = "model.layers.2.linear_attn.in_proj_z.weight"
    expect_refusal(cfg, {n: t for n, t in tensors.items() if n != z}, "missing", z)
    fused = {n.replace("in_proj_qkv.", "in_proj_qkvz."): t for n, t in tensors.items()}
    expect_refusal(cfg, fused, "missing", "in_proj_qkv.weight", "unexpected", "in_proj_qkvz.weight")
    qkv = "model.layers.0.linear_attn.in_proj_qkv.weight"
    expect_refusal(cfg, dict(tensors, **{qkv: torch.zeros(2 * 2 * 3 + 2 * 6 * 5, 16)}), qkv, "shape")
    expect_refusal(dict(cfg, attn_output_gate=False), tensors, "attn_output_gate")
    expect_refusal(dict(cfg, rope_parameters=dict(cfg["rope_parameters"], mrope_section=[2, 1, 1])), tensors,
                   "mrope_section")
    expect_refusal(dict(cfg, rope_parameters=dict(cfg["rope_parameters"], rope_type="yarn")), tensors, "yarn")
    legacy = dict({k: v for k, v in cfg.items() if k != "rope_parameters"}, rope_theta=1000.0,
                  partial_rotary_factor=0.5, rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 0]})
    assert torch.equal(ref.forward(ref.build_model(legacy, tensors), prompt), base)
    # the published multimodal layout of the same weights (untied: top-level lm_head.weight)
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "tie_word_embeddings")}
    mm = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
          "tie_word_embeddings": False, "vision_config": {"depth": 1}}
    mm_tensors = {("model.language_model." + n[6:] if n.startswith("model.") else n): t for n, t in tensors.items()}
    mm_tensors["model.visual.merger.linear_fc1.weight"] = torch.ones(4, 4)
    assert torch.equal(ref.forward(ref.build_model(mm, mm_tensors), prompt), base)
    assert torch.equal(ref.forward(ref.build_model(dict(mm, text_config=dict(text, tie_word_embeddings=False)),
                                                   mm_tensors), prompt), base)
    expect_refusal(mm, {n: t for n, t in mm_tensors.items() if "in_proj_z" not in n}, "missing", "in_proj_z",
                   "model.language_model.")
    expect_refusal({k: v for k, v in mm.items() if k != "text_config"}, mm_tensors, "text_config")
    expect_refusal(dict(mm, text_config=dict(text, num_experts=8)), mm_tensors, "num_experts", "Qwen3.5-MoE")
    print(f"{'qwen35-tiny':24s} ok  brute force, {' '.join(notes)}, refusals, multimodal layout, legacy rope")


def check_ssd_dual():
    """nemotron_h_ref.ssm_scan (the token-by-token recurrence) == bf_ssd_dual on random inputs."""
    import nemotron_h_ref
    gen = torch.Generator().manual_seed(7)
    t_len, nh, hp, groups, n = 29, 6, 5, 3, 7
    x = torch.randn(t_len, nh, hp, generator=gen, dtype=torch.float64)
    dt = torch.exp(torch.empty(t_len, nh, dtype=torch.float64).uniform_(math.log(0.01), math.log(1.0), generator=gen))
    A = -torch.empty(nh, dtype=torch.float64).uniform_(0.2, 4.0, generator=gen)
    B = torch.randn(t_len, groups, n, generator=gen, dtype=torch.float64)
    C = torch.randn(t_len, groups, n, generator=gen, dtype=torch.float64)
    D = torch.empty(nh, dtype=torch.float64).uniform_(0.5, 1.5, generator=gen)
    got = nemotron_h_ref.ssm_scan(x, dt, A, B, C, D).numpy()
    want = bf_ssd_dual(*(v.numpy() for v in (x, dt, A, B, C, D)))
    diff = np.abs(got - want).max()
    assert diff < 1e-10, f"SSD recurrence vs dual form: {diff}"
    recurrent = np.abs(want - D.numpy()[None, :, None] * x.numpy()).max()
    assert recurrent > 1.0, recurrent  # the state term is not negligible
    wrong = bf_ssd_dual(*(v.numpy() for v in (x, dt, A, B, C, D)), gmap="mod")
    assert np.abs(wrong - want).max() > 1e-3, "group map does not matter?"
    print(f"{'ssd-dual':24s} ok  recurrence == dual form to {diff:.1e}")


def tiny_nemotron_h(pattern="M*-M", **overrides):
    """A random float64 Nemotron-H (config, tensors): every kind of block, attention and conv biases,
    two B/C groups, head_dim from hidden_size // num_attention_heads."""
    cfg = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 16,
           "vocab_size": 23, "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern,
           "num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": True,
           "intermediate_size": 24, "mlp_hidden_act": "relu2", "mamba_num_heads": 4, "mamba_head_dim": 3,
           "ssm_state_size": 5, "n_groups": 2, "conv_kernel": 3, "use_conv_bias": True,
           "time_step_limit": [0.05, 0.6], "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False}
    cfg.update(overrides)
    h, v, inner = 16, 23, 12
    conv_dim = inner + 2 * 2 * 5
    shapes = {"backbone.embeddings.weight": [v, h], "backbone.norm_f.weight": [h], "lm_head.weight": [v, h]}
    for i, kind in enumerate(pattern):
        p = f"backbone.layers.{i}."
        shapes[p + "norm.weight"] = [h]
        if kind == "M":
            shapes.update({p + "mixer.in_proj.weight": [inner + conv_dim + 4, h],
                           p + "mixer.conv1d.weight": [conv_dim, 1, 3], p + "mixer.conv1d.bias": [conv_dim],
                           p + "mixer.A_log": [4], p + "mixer.D": [4], p + "mixer.dt_bias": [4],
                           p + "mixer.norm.weight": [inner], p + "mixer.out_proj.weight": [h, inner]})
        elif kind == "*":
            for name, rows, cols in (("q", 16, h), ("k", 8, h), ("v", 8, h), ("o", h, 16)):
                shapes[p + f"mixer.{name}_proj.weight"] = [rows, cols]
                shapes[p + f"mixer.{name}_proj.bias"] = [rows]
        elif kind == "-":
            shapes.update({p + "mixer.up_proj.weight": [24, h], p + "mixer.down_proj.weight": [h, 24]})
    gen = torch.Generator().manual_seed(11)
    tensors = {name: torch.randn(shape, generator=gen, dtype=torch.float64) / (shape[-1] ** 0.5 if len(shape) > 1
                                                                               else 1.0)
               for name, shape in shapes.items()}
    return cfg, tensors


def check_nemotron_h_tiny():
    """On a random tiny Nemotron-H: the loader's refusals, causality, hidden states, the brute force."""
    cfg, tensors = tiny_nemotron_h()
    m = ref.build_model(cfg, tensors, [2])
    assert m.head_dim == 4 and m.pattern == "M*-M" and m.dt_limit == (0.05, 0.6)

    def refused(cfg_, tensors_, *words):
        try:
            ref.build_model(cfg_, tensors_)
        except ValueError as e:
            assert all(w in str(e) for w in words), (words, str(e))
            return
        raise AssertionError(f"accepted; expected a ValueError mentioning {words}")

    refused(tiny_nemotron_h("M*E-")[0], tensors, "hybrid_override_pattern", "'E'")
    refused(dict(cfg, mlp_hidden_act="silu"), tensors, "mlp_hidden_act", "silu")
    refused(dict(cfg, mamba_proj_bias=True), tensors, "mamba_proj_bias")
    refused(dict(cfg, head_dim=4, attention_head_dim=8), tensors, "head_dim")
    missing = "backbone.layers.3.mixer.dt_bias"
    refused(cfg, {n: t for n, t in tensors.items() if n != missing}, "missing", missing)
    refused(cfg, dict(tensors, **{"backbone.layers.1.mixer.q_norm.weight": torch.ones(4)}), "unexpected", "q_norm")
    prompt = [3, 7, 1, 22, 5, 5, 9, 14, 0, 2, 18, 6, 11, 4]
    check_causality(m, prompt)
    check_layers(m, prompt)
    for b in (1e6, -1e6):  # dt far above / below the limits: the clamp decides
        t2 = dict(tensors, **{"backbone.layers.0.mixer.dt_bias": torch.full([4], b, dtype=torch.float64)})
        check_layers(ref.build_model(cfg, t2), prompt)
    tied = {n: t for n, t in tensors.items() if n != "lm_head.weight"}
    mt = ref.build_model(dict(cfg, tie_word_embeddings=True), tied)
    assert torch.equal(mt.weights["lm_head.weight"], tensors["backbone.embeddings.weight"])
    print(f"{'nemotron-h-tiny':24s} ok  refusals, causality, brute force (clamped at both ends)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=None, help="a make_fixtures.py --out directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    check_ssd_dual()
    check_nemotron_h_tiny()
    check_qwen35_tiny()
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
            if name == "qwen35-f32":
                check_qwen35_rope(directory, m, r["prompt_token_ids"])
            if name == "qwen35-bf16":
                check_qwen35_multimodal(directory, m, r["prompt_token_ids"])
            if name == "nemotron-h-f32":  # the published configs' literal JSON Infinity
                assert '"time_step_limit": [\n    0.0,\n    Infinity\n  ]' in open(
                    os.path.join(directory, "config.json")).read()
            check_cli(directory, r)
            print(f"{name:24s} ok  {' '.join(notes)} {extra}")


if __name__ == "__main__":
    main()
