"""Float64 reference for vLLM's Medusa heads ("method": "medusa").

What it is for
  Ground truth for Baton's Medusa tests: draft_heads_ref.py dispatches here (detect_layout ->
  "medusa", build_head -> load_medusa, run -> run_medusa), so its CLI answers for a Medusa head:

    /usr/bin/python3 tools/reference/draft_heads_ref.py --target DIR --head DIR \
        --method medusa --tokens 1,2,3 --k 3                       # -> {"drafts": [...]}

  Checkpoint layout (vLLM's MedusaModel: config architectures MedusaModel / model_type medusa, or
  blocks.{h}.layers.{l}.weight tensors):
    per head h < num_heads a residual block of num_hidden_layers layers
    blocks.{h}.layers.{l}.weight [H, H] (+ .bias [H] when the config's medusa_fc_bias, default
    false), then lm_heads.{h}.weight [D, H] (no bias); with
    original_lm_head one shared lm_head.weight (or lm_heads.0.weight) for every head. Names may
    carry "medusa_heads." (removed, as vLLM does). truncated_vocab_size D (default vocab_size) <
    vocab_size needs token_map (integer [D], distinct target ids < vocab_size); an lm head
    stored with vocab_size rows is cut to the rows token_map picks (vLLM's
    loaded_weight[token_map]). Config keys as vLLM's MedusaConfig reads them: a key containing
    "num" and "heads" becomes num_heads (default 5), else one containing "num" and "layers"
    num_hidden_layers (default 1), e.g. medusa_num_heads (keys that give the same one must
    agree: vLLM would take the last); logit_scale (default 1.0); hidden_size and vocab_size must
    be the target's.

Semantics (the contract Baton implements). Tokens t_0..t_{n-1}; final_p is the target's
  final-norm output at p.
    No token input, no K/V, no feedback: head i reads f = final_p only, x = f, then x = x +
    SiLU(W_l x [+ b_l]) for each of its layers l, logits = logit_scale * lm_head_i(x) over the
    draft vocab (index j = target id token_map[j], or the target vocab); it predicts the token
    at p + 2 + i.
    A Medusa head drafts k <= num_heads tokens at once: d_{i+1} = the target id of argmax of
    head i at p = n-2 (i < k); its "catch-up" logits are each head's at p = 0..n-2.

What it must not do
  Import `transformers`/`safetensors` or copy their code; guess: tensors it does not consume,
  shape or size mismatches with the target are errors. Speed is not a goal.
"""

import json

import torch

import draft_heads_ref as dh


def medusa_config(cfg, where="head"):
    """The config as vLLM's MedusaConfig.from_pretrained reads it: a key containing "num" and
    "heads" is renamed num_heads, else one containing "num" and "layers" num_hidden_layers; then
    MedusaConfig's defaults. vLLM lets the last of several such keys win; here keys that disagree
    are an error."""
    out, seen = dict(cfg), {}
    for key, value in cfg.items():
        if "num" in key and ("heads" in key or "layers" in key):
            short = "num_heads" if "heads" in key else "num_hidden_layers"
            out.pop(key)
            seen.setdefault(short, {})[key] = out[short] = value
    for short, keys in seen.items():
        if len({json.dumps(v) for v in keys.values()}) > 1:
            raise ValueError(f"{where}: config keys {sorted(keys)} all give {short} but disagree: {keys}")
    out.setdefault("hidden_size", 4096)
    out.setdefault("vocab_size", 32001)
    out.setdefault("num_heads", 5)
    out.setdefault("num_hidden_layers", 1)
    if out.get("truncated_vocab_size") is None:
        out["truncated_vocab_size"] = out["vocab_size"]
    return out


def load_medusa(stored, cfg, ht, vocab, where):
    cfg = medusa_config(cfg, where)
    renamed = {}
    for name, t in stored.items():  # vLLM: name.replace("medusa_heads.", "")
        short = name.replace("medusa_heads.", "")
        if short in renamed:
            raise ValueError(f"{where}: {name} and another tensor are both {short} without medusa_heads.")
        renamed[short] = t
    ts = dh.Tensors(renamed, where)
    h, n_heads, n_layers = cfg["hidden_size"], cfg["num_heads"], cfg["num_hidden_layers"]
    d, scale = cfg["truncated_vocab_size"], cfg.get("logit_scale", 1.0)
    bias, shared = cfg.get("medusa_fc_bias", False), cfg.get("original_lm_head", False)
    if h != ht or cfg["vocab_size"] != vocab:
        raise ValueError(f"{where}: Medusa hidden_size / vocab_size {h} / {cfg['vocab_size']} != the target's "
                         f"{ht} / {vocab}")
    if not (isinstance(n_heads, int) and n_heads >= 1 and isinstance(n_layers, int) and n_layers >= 0):
        raise ValueError(f"{where}: num_heads {n_heads!r} must be >= 1 and num_hidden_layers {n_layers!r} >= 0")
    if not (isinstance(d, int) and 0 < d <= vocab):
        raise ValueError(f"{where}: truncated_vocab_size {d!r} must be in 1..vocab_size ({vocab})")
    if not all(isinstance(v, bool) for v in (bias, shared)) or not isinstance(scale, (int, float)) \
            or isinstance(scale, bool):
        raise ValueError(f"{where}: medusa_fc_bias / original_lm_head must be booleans, logit_scale a number")
    token_map = None
    if d < vocab:
        token_map = ts.take("token_map", [d], raw=True)
        if token_map.dtype.is_floating_point or token_map.dtype.is_complex or token_map.dtype == torch.bool:
            raise ValueError(f"{where}: token_map must be an integer tensor, got {token_map.dtype}")
        token_map = token_map.to(torch.int64)
        bad = [int(i) for i in token_map if not 0 <= int(i) < vocab]
        if bad:
            raise ValueError(f"{where}: token_map has target id {bad[0]} outside 0..vocab_size-1 ({vocab})")
        if len(set(token_map.tolist())) != d:
            raise ValueError(f"{where}: token_map repeats target ids")

    def lm_head(name):  # [D, H]; full-vocabulary rows are cut as vLLM does: loaded_weight[token_map]
        if token_map is not None and name in ts.stored and ts.stored[name].shape[0] == vocab:
            return ts.take(name, [vocab, h])[token_map]
        return ts.take(name, [d, h])

    w = {}
    for i in range(n_heads):
        for layer in range(n_layers):
            p = f"blocks.{i}.layers.{layer}."
            w[f"{i}.{layer}.weight"] = ts.take(p + "weight", [h, h])
            if bias:
                w[f"{i}.{layer}.bias"] = ts.take(p + "bias", [h])
    if shared:
        names = [n for n in ("lm_head.weight", "lm_heads.0.weight") if n in ts.stored]
        if len(names) != 1:
            raise ValueError(f"{where}: original_lm_head needs exactly one of lm_head.weight / lm_heads.0.weight, "
                             f"found {names}")
        head_w = lm_head(names[0])
        for i in range(n_heads):
            w[f"{i}.lm_head"] = head_w
    else:
        for i in range(n_heads):
            w[f"{i}.lm_head"] = lm_head(f"lm_heads.{i}.weight")
    ts.finish()
    return dh.Head("medusa", cfg, h, 0.0, [], w, d, num_heads=n_heads, residual_layers=n_layers,
                logit_scale=float(scale), token_map=token_map)


def medusa_logits(head, i, feature):
    """Medusa head i on the target's final hidden state: its residual block, then its lm head."""
    x = feature
    for layer in range(head.residual_layers):
        y = x @ head.w[f"{i}.{layer}.weight"].T
        if f"{i}.{layer}.bias" in head.w:
            y = y + head.w[f"{i}.{layer}.bias"]
        x = x + torch.nn.functional.silu(y)
    return (x @ head.w[f"{i}.lm_head"].T) * head.logit_scale


def run_medusa(head, target, tokens, k):
    if not 0 < k <= head.num_heads:
        raise ValueError(f"a Medusa head with {head.num_heads} heads drafts 1..{head.num_heads} tokens, not {k}")
    feats = dh.TargetFeatures(target, tokens)
    catch_up = [torch.stack([medusa_logits(head, i, feats.feature(head, p)) for p in range(len(tokens) - 1)])
                for i in range(head.num_heads)]
    drafts, margins, draft_logits = [], [], []
    for i in range(k):  # every head at p = n-2
        dh.pick(head, catch_up[i][-1], drafts, margins, draft_logits)
    return {"drafts": drafts, "margins": margins, "draft_logits": draft_logits, "catch_up_logits": catch_up}
