"""Plain float64 PyTorch reference of the EAGLE-3 head and the MTP layer: forwards and greedy drafting.

What it is for
  Ground truth for the C++ speculative-decoding proposers (engine/spec/) and for acceptance.py:
    eagle3_draft(target, head, seq, k) -> k greedy draft tokens (target ids) after `seq`
    mtp_draft(target, mtp, seq, k)     -> the same with the MTP layer (reused cyclically)
  `target` is a tools/reference/transformer_ref.py Model; load_eagle3 / load_mtp read the layouts of
  models/baton-tiny-code/{eagle3,mtp} (REFERENCE §4), checking every name and shape.
      /usr/bin/python3 tools/reference/spec_heads_ref.py --target DIR --eagle3 DIR --mtp DIR \
          --prompt-tokens 0,5,6 --k 4          # -> {"eagle3": [...], "mtp": [...]}

  Semantics, written as the draft layer's KV cache sees them. `seq` = x_0..x_{n-1}, all verified;
  the target has states at positions 0..n-2 (x_{n-1}, the latest token, pairs with state n-2).
    Entries: for p = 0..n-2 a first-step entry (token x_{p+1}, hidden from the target at p,
    position p). Drafting: the entry at n-2 gives d_1; step j >= 2 appends an entry (token d_{j-1},
    hidden = the previous entry's layer output `out`, position n-3+j) whose output gives d_j.
    Every entry attends to all entries before it and itself (RoPE at entry positions): exactly a
    KV cache of the draft layer, which layer_attention(past=...) keeps.
  EAGLE-3: first-step hidden h = fc(cat(aux_0, aux_1, aux_2)), aux_i = the target's residual stream
    entering layer eagle_aux_hidden_state_layer_ids[i]. Layer input cat(input_layernorm(embed(tok)),
    hidden_norm(h)) [2H]; residual h (hidden_norm(h) if norm_before_residual); attention, o_proj,
    + residual; post_attention_layernorm, MLP, + residual = out. Draft token: argmax over
    lm_head(norm(out)) [draft vocab] -> target id d + d2t[d]. embed = the target's embed_tokens.
  MTP (DeepSeek-V3 layout, vLLM deepseek_mtp semantics): first-step hidden h = the target's
    final-norm output at p. x = eh_proj(cat(enorm(e), hnorm(h))), e = embed_tokens(tok) zeroed at
    position 0; out = Llama decoder block(x); logits = shared_head.head(shared_head.norm(out)).

What it must not do
  Import the training code (tools/train/) or transformers: it is the independent check of both.
  Keep state across calls (callers may pass precomputed target states / first-step entries); accept a checkpoint with missing, extra or misshapen tensors.
"""

import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import transformer_ref as ref  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402  (path set up by transformer_ref)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def check_shapes(where, stored, expected):
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    if missing or extra:
        raise ValueError(f"{where}: missing tensors {missing[:5]}, unexpected {extra[:5]}")
    for name, shape in expected.items():
        if list(stored[name].shape) != list(shape):
            raise ValueError(f"{where}: {name} has shape {list(stored[name].shape)}, expected {list(shape)}")


def attn_shapes(prefix, in_dim, out_dim, nh, nkv, hd):
    return {prefix + "q_proj.weight": [nh * hd, in_dim], prefix + "k_proj.weight": [nkv * hd, in_dim],
            prefix + "v_proj.weight": [nkv * hd, in_dim], prefix + "o_proj.weight": [out_dim, nh * hd]}


def mlp_shapes(prefix, h, inter):
    return {prefix + "gate_proj.weight": [inter, h], prefix + "up_proj.weight": [inter, h],
            prefix + "down_proj.weight": [h, inter]}


def load_eagle3(directory):
    """Returns dict(config, w: name -> float64 tensor, d2t: int64 [D], t2d: bool [V], ...)."""
    c = read_json(os.path.join(directory, "config.json"))
    if c.get("architectures") != ["LlamaForCausalLMEagle3"] or c.get("num_hidden_layers") != 1:
        raise ValueError(f"{directory}: not a one-layer LlamaForCausalLMEagle3 config")
    h, ht = c["hidden_size"], c.get("target_hidden_size", c["hidden_size"])
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or h // nh
    d, v = c["draft_vocab_size"], c["vocab_size"]
    expected = {"fc.weight": [h, 3 * ht], "norm.weight": [h], "lm_head.weight": [d, h], "d2t": [d], "t2d": [v]}
    expected.update(attn_shapes("midlayer.self_attn.", 2 * h, h, nh, nkv, hd))
    expected.update(mlp_shapes("midlayer.mlp.", h, c["intermediate_size"]))
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        expected[f"midlayer.{n}.weight"] = [h]
    stored = read_safetensors(os.path.join(directory, "model.safetensors"))
    check_shapes(directory, stored, expected)
    if stored["d2t"].dtype != torch.int64 or stored["t2d"].dtype != torch.bool:
        raise ValueError(f"{directory}: d2t must be I64 and t2d BOOL")
    w = {k: t.to(torch.float64) for k, t in stored.items() if k not in ("d2t", "t2d")}
    return {"config": c, "w": w, "d2t": stored["d2t"], "t2d": stored["t2d"], "heads": nh, "kv_heads": nkv,
            "head_dim": hd, "eps": float(c["rms_norm_eps"]),
            "inv_freq": ref.rope_inv_freq(hd, float(c.get("rope_theta", 10000.0)), c.get("rope_scaling")),
            "layers": list(c["eagle_aux_hidden_state_layer_ids"]),
            "norm_before_residual": bool(c.get("norm_before_residual", False))}


def load_mtp(directory):
    """Returns dict(config, w: name (without the model.layers.N. prefix) -> float64 tensor, ...)."""
    c = read_json(os.path.join(directory, "config.json"))
    if c.get("num_nextn_predict_layers") != 1:
        raise ValueError(f"{directory}: expected num_nextn_predict_layers = 1")
    h, v, n = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or h // nh
    expected = {"enorm.weight": [h], "hnorm.weight": [h], "eh_proj.weight": [h, 2 * h],
                "shared_head.norm.weight": [h], "shared_head.head.weight": [v, h], "embed_tokens.weight": [v, h],
                "input_layernorm.weight": [h], "post_attention_layernorm.weight": [h]}
    expected.update(attn_shapes("self_attn.", h, h, nh, nkv, hd))
    expected.update(mlp_shapes("mlp.", h, c["intermediate_size"]))
    prefix = f"model.layers.{n}."
    stored = read_safetensors(os.path.join(directory, "model.safetensors"))
    check_shapes(directory, stored, {prefix + k: s for k, s in expected.items()})
    w = {k[len(prefix):]: t.to(torch.float64) for k, t in stored.items()}
    return {"config": c, "w": w, "heads": nh, "kv_heads": nkv, "head_dim": hd, "eps": float(c["rms_norm_eps"]),
            "inv_freq": ref.rope_inv_freq(hd, float(c.get("rope_theta", 10000.0)), c.get("rope_scaling"))}


# ----------------------------------------------------------------------------- one draft layer


def lin(w, x, name):
    return x @ w[name].T


def layer_attention(m, w, prefix, x, positions, past=None):
    """Attention of new entries x [E, in] at `positions` [E] after `past` entries.

    past: None or (k, v) [P, KV, hd] of the earlier entries (RoPE applied). New entry i attends to
    every past entry and to new entries 0..i. Returns (output [E, out], (k, v) of past + new).
    """
    e = x.shape[0]
    q = lin(w, x, prefix + "q_proj.weight").view(e, m["heads"], m["head_dim"])
    k = lin(w, x, prefix + "k_proj.weight").view(e, m["kv_heads"], m["head_dim"])
    v = lin(w, x, prefix + "v_proj.weight").view(e, m["kv_heads"], m["head_dim"])
    q, k = ref.apply_rope(q, positions, m["inv_freq"]), ref.apply_rope(k, positions, m["inv_freq"])
    if past is not None:
        k, v = torch.cat([past[0], k]), torch.cat([past[1], v])
    n_past = k.shape[0] - e
    group = m["heads"] // m["kv_heads"]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, kk) / math.sqrt(m["head_dim"])
    allowed = torch.arange(k.shape[0])[None, :] <= (n_past + torch.arange(e))[:, None]
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv).reshape(e, -1)
    return lin(w, out, prefix + "o_proj.weight"), (k, v)


def swiglu(w, prefix, x):
    gate = lin(w, x, prefix + "gate_proj.weight")
    return lin(w, torch.nn.functional.silu(gate) * lin(w, x, prefix + "up_proj.weight"), prefix + "down_proj.weight")


def eagle3_layer(head, emb, h, positions, past=None):
    """The EAGLE-3 midlayer over new entries (emb, h) [E, H]; returns (out [E, H] pre-norm, kv)."""
    w, eps = head["w"], head["eps"]
    hn = ref.rms_norm(h, w["midlayer.hidden_norm.weight"], eps)
    x = torch.cat([ref.rms_norm(emb, w["midlayer.input_layernorm.weight"], eps), hn], dim=-1)
    residual = hn if head["norm_before_residual"] else h
    a, kv = layer_attention(head, w, "midlayer.self_attn.", x, positions, past)
    r = residual + a
    return r + swiglu(w, "midlayer.mlp.", ref.rms_norm(r, w["midlayer.post_attention_layernorm.weight"], eps)), kv


def eagle3_logits(head, out):
    w = head["w"]
    return ref.rms_norm(out, w["norm.weight"], head["eps"]) @ w["lm_head.weight"].T


def eagle3_token(head, out):
    d = int(eagle3_logits(head, out).argmax())
    return d + int(head["d2t"][d])


def mtp_layer(mtp, emb, h, positions, past=None):
    """The MTP layer over new entries (emb, h) [E, H]; embeddings at position 0 are zeroed."""
    w, eps = mtp["w"], mtp["eps"]
    emb = torch.where((positions == 0)[:, None], torch.zeros_like(emb), emb)
    x = torch.cat([ref.rms_norm(emb, w["enorm.weight"], eps), ref.rms_norm(h, w["hnorm.weight"], eps)], dim=-1)
    x = lin(w, x, "eh_proj.weight")
    a, kv = layer_attention(mtp, w, "self_attn.", ref.rms_norm(x, w["input_layernorm.weight"], eps), positions, past)
    r = x + a
    return r + swiglu(w, "mlp.", ref.rms_norm(r, w["post_attention_layernorm.weight"], eps)), kv


def mtp_logits(mtp, out):
    w = mtp["w"]
    return ref.rms_norm(out, w["shared_head.norm.weight"], mtp["eps"]) @ w["shared_head.head.weight"].T


def mtp_token(mtp, out):
    return int(mtp_logits(mtp, out).argmax())


# ----------------------------------------------------------------------------- drafting


def first_entries(layer_fn, embed, seq, first_h):
    """First-step entries of seq: for p = 0..n-2, (token seq[p+1], first_h[p]) at position p.
    Returns (out [n-1, H], (k, v)). By causality, rows < m are those of seq[:m+1] too."""
    n = len(seq)
    if n < 2 or first_h.shape[0] < n - 1:
        raise ValueError(f"need >= 2 tokens and n-1 first-step hidden states (n={n}, got {first_h.shape[0]})")
    return layer_fn(embed[torch.as_tensor(list(seq[1:]))], first_h[:n - 1], torch.arange(n - 1), None)


def draft_chain(layer_fn, token_fn, embed, seq, first_h, k, first=None):
    """Greedy k-step drafting (header). first: first_entries() of seq or of a longer sequence that
    starts with seq (its rows beyond n-2 are ignored), else computed here."""
    n = len(seq)
    out, (keys, values) = first if first is not None else first_entries(layer_fn, embed, seq, first_h)
    out, kv = out[n - 2], (keys[:n - 1], values[:n - 1])
    drafts = []
    for j in range(k):
        drafts.append(token_fn(out))
        if j + 1 < k:  # the next entry: the draft token, this step's output, at position n-1+j
            new, kv = layer_fn(embed[torch.as_tensor([drafts[-1]])], out[None], torch.tensor([n - 1 + j]), kv)
            out = new[0]
    return drafts


def target_states(target, seq):
    """The target's per-layer inputs and final-norm output for seq (list of [n, H])."""
    return ref.forward(target, seq, hidden_states=True)[1]


def eagle3_first_hidden(head, states):
    """fc(cat(aux_0, aux_1, aux_2)) for every row of the target states."""
    return torch.cat([states[i] for i in head["layers"]], dim=-1) @ head["w"]["fc.weight"].T


def eagle3_parts(target, head):
    return ((lambda e, h, pos, past: eagle3_layer(head, e, h, pos, past)), (lambda o: eagle3_token(head, o)),
            target.weights["model.embed_tokens.weight"])


def mtp_parts(mtp):
    return ((lambda e, h, pos, past: mtp_layer(mtp, e, h, pos, past)), (lambda o: mtp_token(mtp, o)),
            mtp["w"]["embed_tokens.weight"])


def eagle3_draft(target, head, seq, k, states=None, first=None):
    """k greedy EAGLE-3 drafts after seq. states: target_states of seq or of a longer sequence
    starting with seq; first: first_entries over such a sequence (both optional, for speed)."""
    layer_fn, token_fn, embed = eagle3_parts(target, head)
    if first is None:
        states = states or target_states(target, seq)
        first = first_entries(layer_fn, embed, seq, eagle3_first_hidden(head, states))
    return draft_chain(layer_fn, token_fn, embed, seq, None, k, first)


def mtp_draft(target, mtp, seq, k, states=None, first=None):
    """k greedy MTP drafts after seq (the one MTP layer reused for every step)."""
    layer_fn, token_fn, embed = mtp_parts(mtp)
    if first is None:
        states = states or target_states(target, seq)
        first = first_entries(layer_fn, embed, seq, states[-1])
    return draft_chain(layer_fn, token_fn, embed, seq, None, k, first)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--eagle3")
    ap.add_argument("--mtp")
    ap.add_argument("--prompt-tokens", required=True, help="comma-separated ids (>= 2), e.g. BOS first")
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args(argv)
    target = ref.load_model(args.target)
    seq = [int(s) for s in args.prompt_tokens.split(",") if s.strip()]
    states = target_states(target, seq)
    out = {}
    if args.eagle3:
        out["eagle3"] = eagle3_draft(target, load_eagle3(args.eagle3), seq, args.k, states)
    if args.mtp:
        out["mtp"] = mtp_draft(target, load_mtp(args.mtp), seq, args.k, states)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
