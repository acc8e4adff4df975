"""Plain float64 PyTorch reference for the decoder-only models Baton supports.

What it is for
  Producing ground-truth logits / greedy continuations for the C++ engine's
  tests (tools/fixtures/make_fixtures.py writes them into reference.json), and
  answering "what should the model output?" for any small HF-layout model dir:

    /usr/bin/python3 tools/reference/transformer_ref.py --model DIR \
        --prompt-tokens 1,2,3 --max-tokens N        # -> {"token_ids": [...]}

  Architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
  Qwen3ForCausalLM, Qwen3MoeForCausalLM (a softmax router picks each token's
  top-k experts; their SiLU MLPs are summed with the router's probabilities,
  renormalized when norm_topk_prob), Qwen2MoeForCausalLM (Qwen2 attention, the
  same experts plus a shared expert scaled by sigmoid(shared_expert_gate)). Weights are read with tools/fixtures/safetensors_io.py,
  upcast to float64, and everything (RMSNorm, RoPE, softmax) runs in float64.
  No KV cache: every call recomputes the whole sequence at positions 0..T-1.

What it must not do
  Import `transformers` or `safetensors`, or copy Hugging Face code: it is written
  from the math so that it is an independent check. It must not guess: unknown
  architectures, activations, rope types, or tensors it does not consume are
  errors, never silently ignored. It is for tiny models; speed is not a goal.
"""

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from safetensors_io import read_model_dir  # noqa: E402

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM")


@dataclass
class Model:
    config: dict
    arch: str
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    eps: float
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    windows: list  # per layer: None (full causal) or window size
    inv_freq: torch.Tensor  # [head_dim/2] float64, after rope scaling
    weights: dict = field(repr=False)  # name -> float64 tensor
    eos_ids: list = field(default_factory=list)
    sparse: list = field(default_factory=list)  # per layer: a mixture of experts (True) or a dense MLP
    n_experts: int = 0
    top_k: int = 0
    norm_topk_prob: bool = False
    shared_expert: bool = False


# ----------------------------------------------------------------------------- config


def read_json(path):
    with open(path) as f:
        return json.load(f)


def rope_inv_freq(head_dim, theta, scaling):
    """inv_freq[i] = theta^(-2i/hd), then the rope_scaling rule (llama3 / linear / default)."""
    half = head_dim // 2
    inv = torch.tensor([1.0 / theta ** (2.0 * i / head_dim) for i in range(half)], dtype=torch.float64)
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv
    if kind == "linear":
        return inv / float(scaling["factor"])
    if kind == "llama3":
        return llama3_scale(inv, scaling)
    raise ValueError(f"unsupported rope_scaling type {kind!r}")


def llama3_scale(inv, s):
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    orig = float(s["original_max_position_embeddings"])
    low_wavelen, high_wavelen = orig / low, orig / high
    out = []
    for f in inv.tolist():
        wavelen = 2.0 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append((1.0 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def layer_windows(cfg, arch, n_layers):
    """Sliding-window size per layer (None = plain causal)."""
    window = cfg.get("sliding_window")
    if arch == "MistralForCausalLM":
        active = isinstance(window, int) and window > 0
        return [window if active else None] * n_layers
    if arch.startswith(("Qwen2", "Qwen3")) and cfg.get("use_sliding_window"):
        first = cfg.get("max_window_layers", n_layers)
        return [window if i >= first else None for i in range(n_layers)]
    return [None] * n_layers


def eos_ids_of(model_dir, cfg):
    """EOS ids from generation_config.json (preferred) and config.json, as a sorted list."""
    ids = set()
    sources = [cfg]
    gen_path = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(gen_path):
        sources.insert(0, read_json(gen_path))
    for src in sources:
        eos = src.get("eos_token_id")
        if eos is not None:
            ids.update(eos if isinstance(eos, list) else [eos])
    return sorted(ids)


def check_supported(cfg, arch):
    if arch not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture {arch!r}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r}")
    if cfg.get("mlp_bias"):
        raise ValueError("mlp_bias=true is not supported")
    if cfg.get("shared_expert_intermediate_size") and arch != "Qwen2MoeForCausalLM":
        raise ValueError(f"{arch} has no shared expert")


# ----------------------------------------------------------------------------- loading


def expected_names(m, tied):
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not tied:
        names.append("lm_head.weight")
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        names += [p + f"self_attn.{x}_proj.weight" for x in "qkvo"]
        if m.sparse[i]:
            names.append(p + "mlp.gate.weight")
            names += [p + f"mlp.experts.{e}.{x}_proj.weight" for e in range(m.n_experts) for x in ("gate", "up", "down")]
            if m.shared_expert:
                names += [p + f"mlp.shared_expert.{x}_proj.weight" for x in ("gate", "up", "down")]
                names.append(p + "mlp.shared_expert_gate.weight")
        else:
            names += [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
        if m.qkv_bias:
            names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
        if m.o_bias:
            names.append(p + "self_attn.o_proj.bias")
        if m.qk_norm:
            names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return names


def load_model(model_dir):
    """Read config.json + weights of an HF-layout dir; returns a float64 Model."""
    cfg = read_json(os.path.join(model_dir, "config.json"))
    return build_model(cfg, read_model_dir(model_dir), eos_ids_of(model_dir, cfg))


def build_model(cfg, stored, eos_ids=()):
    """Model from a config dict and dict name -> tensor (any float dtype, as stored)."""
    arch = cfg["architectures"][0]
    check_supported(cfg, arch)
    hidden, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    n_layers = cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or hidden // n_heads
    # Qwen2 always has q/k/v biases and never an o_proj bias. Llama and Qwen3
    # follow `attention_bias`, which (as in HF) covers o_proj too. Mistral: none.
    attention_bias = (arch in ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
                      and bool(cfg.get("attention_bias")))
    m = Model(
        config=cfg,
        arch=arch,
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
        head_dim=head_dim,
        eps=float(cfg["rms_norm_eps"]),
        qkv_bias=arch in ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM") or attention_bias,
        o_bias=attention_bias,
        qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"),
        windows=layer_windows(cfg, arch, n_layers),
        inv_freq=rope_inv_freq(head_dim, float(cfg.get("rope_theta", 10000.0)), cfg.get("rope_scaling")),
        weights={},
        eos_ids=sorted(eos_ids),
    )
    assert n_heads % m.n_kv_heads == 0 and head_dim % 2 == 0
    m.sparse = [False] * n_layers
    if arch in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"):  # their configs' keys and defaults
        qwen2 = arch == "Qwen2MoeForCausalLM"
        m.n_experts = cfg.get("num_experts", 60 if qwen2 else 128)
        m.top_k = cfg.get("num_experts_per_tok", 4 if qwen2 else 8)
        m.shared_expert = qwen2
        m.norm_topk_prob = bool(cfg.get("norm_topk_prob", False))
        step, dense = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or [])
        m.sparse = [i not in dense and m.n_experts > 0 and (i + 1) % step == 0 for i in range(n_layers)]
    tied = bool(cfg.get("tie_word_embeddings", False))
    names = expected_names(m, tied)
    missing = [n for n in names if n not in stored]
    extra = sorted(set(stored) - set(names))
    if missing or extra:
        raise ValueError(f"tensor mismatch: missing {missing[:5]}, unexpected {extra[:5]}")
    m.weights = {n: stored[n].to(torch.float64) for n in names}
    if tied:
        m.weights["lm_head.weight"] = m.weights["model.embed_tokens.weight"]
    return m


# ----------------------------------------------------------------------------- math


def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def linear(m, x, prefix, bias=False):
    y = x @ m.weights[prefix + ".weight"].T
    return y + m.weights[prefix + ".bias"] if bias else y


def apply_rope(x, positions, inv_freq):
    """Non-interleaved ("rotate_half") RoPE. x: [T, heads, hd]."""
    half = x.shape[-1] // 2
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [T, hd/2]
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention_mask(t, window):
    """allowed[q, k]: causal, and within the `window` most recent positions if set."""
    q = torch.arange(t)[:, None]
    k = torch.arange(t)[None, :]
    allowed = k <= q
    if window is not None:
        allowed &= k > q - window
    return allowed


def attention(m, i, x):
    p = f"model.layers.{i}.self_attn."
    t = x.shape[0]
    q = linear(m, x, p + "q_proj", m.qkv_bias).view(t, m.n_heads, m.head_dim)
    k = linear(m, x, p + "k_proj", m.qkv_bias).view(t, m.n_kv_heads, m.head_dim)
    v = linear(m, x, p + "v_proj", m.qkv_bias).view(t, m.n_kv_heads, m.head_dim)
    if m.qk_norm:  # per-head RMSNorm, before RoPE
        q = rms_norm(q, m.weights[p + "q_norm.weight"], m.eps)
        k = rms_norm(k, m.weights[p + "k_norm.weight"], m.eps)
    pos = torch.arange(t)
    q, k = apply_rope(q, pos, m.inv_freq), apply_rope(k, pos, m.inv_freq)
    group = m.n_heads // m.n_kv_heads  # query head h reads kv head h // group
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(m.head_dim)
    scores = scores.masked_fill(~attention_mask(t, m.windows[i]), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", probs, v).reshape(t, m.n_heads * m.head_dim)
    return linear(m, out, p + "o_proj", m.o_bias)


def mlp(m, i, x, p=None):
    p = p or f"model.layers.{i}.mlp."
    gate = linear(m, x, p + "gate_proj")
    return linear(m, torch.nn.functional.silu(gate) * linear(m, x, p + "up_proj"), p + "down_proj")


def experts(m, i, x):
    """Mixture of experts: softmax over the router's logits, each token's top_k experts (the
    largest probabilities) weighted by those probabilities (renormalized when norm_topk_prob)."""
    p = f"model.layers.{i}.mlp."
    probs = torch.softmax(linear(m, x, p + "gate"), dim=-1)  # [T, E]
    weights, chosen = torch.topk(probs, m.top_k, dim=-1)
    if m.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(m.top_k):
            e = int(chosen[t, j])
            out[t] += weights[t, j] * mlp(m, i, x[t:t + 1], f"{p}experts.{e}.")[0]
    if m.shared_expert:
        gate = torch.sigmoid(linear(m, x, p + "shared_expert_gate"))  # [T, 1]
        out = out + gate * mlp(m, i, x, p + "shared_expert.")
    return out


def decoder_layer(m, i, x):
    p = f"model.layers.{i}."
    x = x + attention(m, i, rms_norm(x, m.weights[p + "input_layernorm.weight"], m.eps))
    h = rms_norm(x, m.weights[p + "post_attention_layernorm.weight"], m.eps)
    return x + (experts(m, i, h) if m.sparse[i] else mlp(m, i, h))


def forward(m, token_ids, hidden_states=False):
    """Logits float64 [T, V] for positions 0..T-1.

    With hidden_states=True returns (logits, states) where states is a list of
    n_layers + 1 tensors [T, H]: the input of each layer, then the final-norm output.
    """
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    x = m.weights["model.embed_tokens.weight"][ids]
    states = []
    for i in range(m.n_layers):
        states.append(x)
        x = decoder_layer(m, i, x)
    x = rms_norm(x, m.weights["model.norm.weight"], m.eps)
    states.append(x)
    logits = x @ m.weights["lm_head.weight"].T
    return (logits, states) if hidden_states else logits


def greedy(m, prompt_ids, max_new_tokens, eos_ids=None):
    """Greedy decoding by full recomputation. Returns (new tokens, top1-top2 margins).

    Stops after emitting a token in eos_ids (that token is included).
    eos_ids=None uses the model's EOS ids from generation_config/config.
    """
    eos = set(m.eos_ids if eos_ids is None else eos_ids)
    seq, tokens, margins = list(prompt_ids), [], []
    for _ in range(max_new_tokens):
        last = forward(m, seq)[-1]
        top2 = torch.topk(last, 2)
        token = int(top2.indices[0])
        tokens.append(token)
        margins.append(float(top2.values[0] - top2.values[1]))
        seq.append(token)
        if token in eos:
            break
    return tokens, margins


# ----------------------------------------------------------------------------- CLI


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF-layout model directory")
    ap.add_argument("--prompt-tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--max-tokens", type=int, default=16, help="max new tokens")
    ap.add_argument("--eos-ids", default=None, help="comma-separated EOS override")
    args = ap.parse_args(argv)
    m = load_model(args.model)
    prompt = [int(s) for s in args.prompt_tokens.split(",") if s.strip()]
    eos = None if args.eos_ids is None else [int(s) for s in args.eos_ids.split(",") if s.strip()]
    tokens, _ = greedy(m, prompt, args.max_tokens, eos)
    print(json.dumps({"token_ids": tokens}))


if __name__ == "__main__":
    main()
