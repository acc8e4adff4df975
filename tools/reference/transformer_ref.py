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
  same experts plus a shared expert scaled by sigmoid(shared_expert_gate)),
  NemotronHForCausalLM (Mamba-2 / attention / relu2-MLP blocks; build_model and forward
  dispatch to nemotron_h_ref.py, which describes it), and
  Qwen3NextForCausalLM (published checkpoint layout; `mtp.*` tensors are rejected):
    - per layer_types (or full_attention_interval) a layer mixes tokens either by
      gated full attention (q_proj yields per head [query | gate]; zero-centred q/k
      norms; partial RoPE on the first head_dim * partial_rotary_factor dims;
      output * sigmoid(gate) before o_proj) or by a gated DeltaNet (fused
      in_proj_qkvz / in_proj_ba, see linear_attention(); depthwise causal conv1d +
      SiLU; L2-normed q/k; the delta-rule recurrence run token by token from a zero
      state; per-head RMSNorm gated by silu(z));
    - the Qwen2-MoE expert block (dense MLP on mlp_only_layers / off-step layers);
    - every RMSNorm except the gated one is zero-centred: it scales by (1 + w);
    - config defaults as in Qwen3NextConfig (head_dim 256, partial_rotary_factor 0.25, ...),
      but num_key_value_heads must be given; attention_bias / use_sliding_window are errors.
  Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (dense Qwen3.5): Qwen3-Next with a dense MLP in
  every layer (num_experts > 0 is an error), separate DeltaNet in_proj_qkv / _z / _b / _a, and
  rope_parameters; ConditionalGeneration: text_config, model.language_model.*, model.visual.* skipped.
  Weights are read with tools/fixtures/safetensors_io.py, upcast to float64, and
  everything (RMSNorm, RoPE, softmax, the recurrence) runs in float64.
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
                 "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "Qwen3NextForCausalLM",
                 "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")
QWEN3_5 = ARCHITECTURES[-2:]  # dense Qwen3.5 (Qwen3_5MoeForCausalLM is another architecture: unsupported)
HYBRID = ("Qwen3NextForCausalLM",) + QWEN3_5  # gated DeltaNet / gated attention layers
MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "Qwen3NextForCausalLM")
FULL, LINEAR = "full_attention", "linear_attention"  # Qwen3-Next layer_types values
NEMOTRON_H = "NemotronHForCausalLM"  # lives in nemotron_h_ref.py (imported lazily: it imports this module)


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
    inv_freq: torch.Tensor  # [rotary_dim/2] float64, after rope scaling (rotary_dim = head_dim unless partial)
    weights: dict = field(repr=False)  # name -> float64 tensor
    eos_ids: list = field(default_factory=list)
    sparse: list = field(default_factory=list)  # per layer: a mixture of experts (True) or a dense MLP
    n_experts: int = 0
    top_k: int = 0
    norm_topk_prob: bool = False
    shared_expert: bool = False
    # Qwen3-Next (defaults describe every other architecture)
    mixers: list = field(default_factory=list)  # per layer: FULL (softmax attention) or LINEAR (gated DeltaNet)
    zero_centred: bool = False  # RMSNorms scale by (1 + w), the gated DeltaNet norm excepted
    attn_gate: bool = False  # q_proj yields per head [query | output gate]
    rotary_dim: int = 0  # RoPE rotates the first rotary_dim dims of each head
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 0
    split_proj: bool = False  # Qwen3.5: DeltaNet in_proj_qkv / _z / _b / _a instead of in_proj_qkvz / _ba


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
    if arch in HYBRID:
        return [None] * n_layers  # check_supported rejects use_sliding_window
    if arch.startswith(("Qwen2", "Qwen3")) and cfg.get("use_sliding_window"):
        first = cfg.get("max_window_layers", n_layers)
        return [window if i >= first else None for i in range(n_layers)]
    return [None] * n_layers


def eos_ids_of(model_dir, cfg):
    """EOS ids from generation_config.json (preferred) and config.json, as a sorted list."""
    ids = set()
    sources = [cfg, cfg.get("text_config") or {}]
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
    if cfg.get("shared_expert_intermediate_size") and arch not in ("Qwen2MoeForCausalLM", "Qwen3NextForCausalLM"):
        raise ValueError(f"{arch} has no shared expert")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0 and arch not in HYBRID:
        raise ValueError(f"partial_rotary_factor is only supported for Qwen3-Next / Qwen3.5, not {arch}")
    if arch in HYBRID:
        if cfg.get("attention_bias"):
            raise ValueError(f"{arch} with attention_bias=true is not supported")
        if cfg.get("use_sliding_window"):
            raise ValueError(f"{arch} with use_sliding_window=true is not supported")
        if "num_key_value_heads" not in cfg:
            raise ValueError(f"{arch} config without num_key_value_heads")
    if arch in QWEN3_5 and cfg.get("num_experts"):
        raise ValueError(f"{arch} with num_experts={cfg['num_experts']}: Qwen3.5-MoE (Qwen3_5MoeForCausalLM) "
                         "is a different architecture, not supported")
    if arch in QWEN3_5 and not cfg.get("attn_output_gate", True):
        raise ValueError(f"{arch} with attn_output_gate=false is not supported")


def qwen3_next_layer_types(cfg, n_layers):
    """layer_types, or else every full_attention_interval-th layer (1-based) full attention."""
    types = cfg.get("layer_types")
    if types is None:
        interval = cfg.get("full_attention_interval", 4)
        types = [LINEAR if (i + 1) % interval else FULL for i in range(n_layers)]
    if len(types) != n_layers or any(t not in (FULL, LINEAR) for t in types):
        raise ValueError(f"bad layer_types {types!r} for {n_layers} layers")
    return list(types)


def qwen3_5_text(cfg, stored):
    """Qwen3_5ForConditionalGeneration's text model: (the keys of text_config, tie_word_embeddings from
    either level; tensors model.language_model.X renamed model.X, lm_head.weight and mtp.* as they are,
    the vision tower model.visual.* skipped). Any other architecture passes through unchanged."""
    if cfg["architectures"][0] != "Qwen3_5ForConditionalGeneration":
        return cfg, stored
    if not isinstance(cfg.get("text_config"), dict):
        raise ValueError("Qwen3_5ForConditionalGeneration config without a text_config object")
    ties = {bool(c["tie_word_embeddings"]) for c in (cfg, cfg["text_config"]) if "tie_word_embeddings" in c}
    if len(ties) > 1:
        raise ValueError("tie_word_embeddings differs between config.json's top level and text_config")
    text = dict(cfg["text_config"], architectures=cfg["architectures"], tie_word_embeddings=ties.pop() if ties else False)
    lm = "model.language_model."
    odd = sorted(n for n in stored if not n.startswith((lm, "model.visual.", "mtp.")) and n != "lm_head.weight")
    if odd:
        raise ValueError(f"unexpected tensors outside model.language_model. / model.visual.: {odd[:5]}")
    return text, {"model." + n[len(lm):] if n.startswith(lm) else n: t for n, t in stored.items()
                  if not n.startswith("model.visual.")}


def configure_qwen3_next(m, cfg):
    m.mixers = qwen3_next_layer_types(cfg, m.n_layers)
    m.zero_centred = m.attn_gate = True
    m.split_proj = m.arch in QWEN3_5
    m.lin_k_heads = cfg.get("linear_num_key_heads", 16)
    m.lin_v_heads = cfg.get("linear_num_value_heads", 32)
    m.lin_k_dim = cfg.get("linear_key_head_dim", 128)
    m.lin_v_dim = cfg.get("linear_value_head_dim", 128)
    m.conv_kernel = cfg.get("linear_conv_kernel_dim", 4)
    if m.lin_v_heads % m.lin_k_heads:
        raise ValueError(f"linear_num_value_heads {m.lin_v_heads} not a multiple of "
                         f"linear_num_key_heads {m.lin_k_heads}")


def qwen3_next_shapes(m):
    """Expected shapes of the tensors whose fused layouts the math relies on."""
    nk, nv, dk, dv = m.lin_k_heads, m.lin_v_heads, m.lin_k_dim, m.lin_v_dim
    hd, shapes = m.head_dim, {}
    for i in range(m.n_layers):
        if m.mixers[i] == LINEAR:
            p = f"model.layers.{i}.linear_attn."
            if m.split_proj:
                shapes.update({p + "in_proj_qkv.weight": [2 * nk * dk + nv * dv, m.hidden],
                               p + "in_proj_z.weight": [nv * dv, m.hidden],
                               p + "in_proj_b.weight": [nv, m.hidden], p + "in_proj_a.weight": [nv, m.hidden]})
            else:
                shapes.update({p + "in_proj_qkvz.weight": [2 * nk * dk + 2 * nv * dv, m.hidden],
                               p + "in_proj_ba.weight": [2 * nv, m.hidden]})
            shapes.update({p + "conv1d.weight": [2 * nk * dk + nv * dv, 1, m.conv_kernel],
                           p + "A_log": [nv], p + "dt_bias": [nv], p + "norm.weight": [dv],
                           p + "out_proj.weight": [m.hidden, nv * dv]})
        else:
            p = f"model.layers.{i}.self_attn."
            shapes.update({p + "q_proj.weight": [2 * m.n_heads * hd, m.hidden],
                           p + "k_proj.weight": [m.n_kv_heads * hd, m.hidden],
                           p + "v_proj.weight": [m.n_kv_heads * hd, m.hidden],
                           p + "o_proj.weight": [m.hidden, m.n_heads * hd],
                           p + "q_norm.weight": [hd], p + "k_norm.weight": [hd]})
    return shapes


# ----------------------------------------------------------------------------- loading


SPLIT_PROJ = ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight")  # Qwen3.5


def expected_names(m, tied):
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not tied:
        names.append("lm_head.weight")
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        if m.mixers[i] == LINEAR:
            proj = SPLIT_PROJ if m.split_proj else ("in_proj_qkvz.weight", "in_proj_ba.weight")
            names += [p + "linear_attn." + x for x in proj + ("conv1d.weight", "A_log", "dt_bias", "norm.weight",
                                                               "out_proj.weight")]
        else:
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
        if m.qk_norm and m.mixers[i] == FULL:
            names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return names


def load_model(model_dir):
    """Read config.json + weights of an HF-layout dir; returns a float64 Model."""
    cfg = read_json(os.path.join(model_dir, "config.json"))
    return build_model(cfg, read_model_dir(model_dir), eos_ids_of(model_dir, cfg))


def build_model(cfg, stored, eos_ids=()):
    """Model from a config dict and dict name -> tensor (any float dtype, as stored)."""
    arch = cfg["architectures"][0]
    if arch == NEMOTRON_H:
        import nemotron_h_ref
        return nemotron_h_ref.build_model(cfg, stored, eos_ids)
    cfg, stored = qwen3_5_text(cfg, stored)
    check_supported(cfg, arch)
    hidden, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    n_layers = cfg["num_hidden_layers"]
    qwen3_next = arch in HYBRID  # Qwen3-Next or Qwen3.5
    head_dim = cfg.get("head_dim") or (256 if qwen3_next else hidden // n_heads)
    # Qwen3.5 may give the RoPE keys in rope_parameters (else the top level). Its multimodal RoPE
    # (mrope_section, mrope_interleaved) puts the same position on all three axes for text-only input,
    # which is exactly plain RoPE over the rotary dims: those keys are accepted and ignored.
    rope = (cfg.get("rope_parameters") or {}) if arch in QWEN3_5 else {}
    scaling = rope or cfg.get("rope_scaling")
    rotary_dim = int(head_dim * rope.get("partial_rotary_factor",
                                         cfg.get("partial_rotary_factor", 0.25 if qwen3_next else 1.0)))
    if sum((scaling or {}).get("mrope_section") or []) not in (0, rotary_dim // 2):
        raise ValueError(f"mrope_section {scaling['mrope_section']} does not cover rotary dim {rotary_dim} / 2")
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
        eps=float(cfg.get("rms_norm_eps", 1e-6) if qwen3_next else cfg["rms_norm_eps"]),
        qkv_bias=arch in ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM") or attention_bias,
        o_bias=attention_bias,
        qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM") or qwen3_next,
        windows=layer_windows(cfg, arch, n_layers),
        inv_freq=rope_inv_freq(rotary_dim, float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))), scaling),
        weights={},
        eos_ids=sorted(eos_ids),
        mixers=[FULL] * n_layers,
        rotary_dim=rotary_dim,
    )
    assert n_heads % m.n_kv_heads == 0 and head_dim % 2 == 0
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise ValueError(f"rotary dim {rotary_dim} of head_dim {head_dim}: must be even, in (0, head_dim]")
    if qwen3_next:
        configure_qwen3_next(m, cfg)
    m.sparse = [False] * n_layers
    if arch in MOE_ARCHITECTURES:  # their configs' keys and defaults
        defaults = {"Qwen2MoeForCausalLM": (60, 4, False), "Qwen3MoeForCausalLM": (128, 8, False),
                    "Qwen3NextForCausalLM": (512, 10, True)}[arch]  # num_experts, top k, norm_topk_prob
        m.n_experts = cfg.get("num_experts", defaults[0])
        m.top_k = cfg.get("num_experts_per_tok", defaults[1])
        m.shared_expert = arch in ("Qwen2MoeForCausalLM", "Qwen3NextForCausalLM")
        m.norm_topk_prob = bool(cfg.get("norm_topk_prob", defaults[2]))
        step, dense = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or [])
        m.sparse = [i not in dense and m.n_experts > 0 and (i + 1) % step == 0 for i in range(n_layers)]
    tied = bool(cfg.get("tie_word_embeddings", False))
    names = expected_names(m, tied)
    mtp = sorted(n for n in stored if n.startswith("mtp."))
    if mtp:
        raise ValueError(f"multi-token-prediction tensors are not supported: {mtp[:3]}")
    missing = [n for n in names if n not in stored]
    extra = sorted(set(stored) - set(names))
    if missing or extra:
        where = " (model.X here is model.language_model.X in the checkpoint)" if arch in QWEN3_5[1:] else ""
        raise ValueError(f"tensor mismatch{where}: missing {missing[:5]}, unexpected {extra[:5]}")
    if qwen3_next:
        for n, shape in qwen3_next_shapes(m).items():
            if list(stored[n].shape) != shape:
                raise ValueError(f"{n}: shape {list(stored[n].shape)}, expected {shape}")
    m.weights = {n: stored[n].to(torch.float64) for n in names}
    if tied:
        m.weights["lm_head.weight"] = m.weights["model.embed_tokens.weight"]
    return m


# ----------------------------------------------------------------------------- math


def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def norm(m, x, name):
    """The model's RMSNorm with weight tensor `name`: scale w, or (1 + w) when zero-centred."""
    w = m.weights[name]
    return rms_norm(x, 1.0 + w if m.zero_centred else w, m.eps)


def linear(m, x, prefix, bias=False):
    y = x @ m.weights[prefix + ".weight"].T
    return y + m.weights[prefix + ".bias"] if bias else y


def apply_rope(x, positions, inv_freq):
    """Non-interleaved ("rotate_half") RoPE. x: [T, heads, hd].

    Rotates the first rotary_dim = 2 * len(inv_freq) dims of each head, pairs (i, i + rotary_dim/2);
    the remaining hd - rotary_dim dims (partial rotary) pass through."""
    rot = 2 * inv_freq.shape[0]
    if rot < x.shape[-1]:
        return torch.cat([apply_rope(x[..., :rot], positions, inv_freq), x[..., rot:]], dim=-1)
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
    if m.attn_gate:  # per head [query (head_dim) | gate (head_dim)]
        q, gate = linear(m, x, p + "q_proj").view(t, m.n_heads, 2 * m.head_dim).split(m.head_dim, dim=-1)
    else:
        q = linear(m, x, p + "q_proj", m.qkv_bias).view(t, m.n_heads, m.head_dim)
    k = linear(m, x, p + "k_proj", m.qkv_bias).view(t, m.n_kv_heads, m.head_dim)
    v = linear(m, x, p + "v_proj", m.qkv_bias).view(t, m.n_kv_heads, m.head_dim)
    if m.qk_norm:  # per-head RMSNorm, before RoPE
        q = norm(m, q, p + "q_norm.weight")
        k = norm(m, k, p + "k_norm.weight")
    pos = torch.arange(t)
    q, k = apply_rope(q, pos, m.inv_freq), apply_rope(k, pos, m.inv_freq)
    group = m.n_heads // m.n_kv_heads  # query head h reads kv head h // group
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(m.head_dim)
    scores = scores.masked_fill(~attention_mask(t, m.windows[i]), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", probs, v).reshape(t, m.n_heads * m.head_dim)
    if m.attn_gate:
        out = out * torch.sigmoid(gate.reshape(t, m.n_heads * m.head_dim))
    return linear(m, out, p + "o_proj", m.o_bias)


def l2_normalize(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


def linear_attention(m, i, x):
    """Qwen3-Next's gated DeltaNet over the sequence x [T, H], from a zero state.

    Fused layouts (nk key heads of dk, nv value heads of dv, r = nv / nk):
      in_proj_qkvz output per token = nk groups of [q_g (dk) | k_g (dk) | v_g (r*dv) | z_g (r*dv)];
      in_proj_ba output per token   = nk groups of [b_g (r) | a_g (r)];
      value head g*r + j is group g's j-th, and reads key head g (= h // r).
      Qwen3.5 (m.split_proj): in_proj_qkv = [q (nk*dk) | k (nk*dk) | v (nv*dv)], in_proj_z (nv*dv),
      in_proj_b (nv), in_proj_a (nv), all in head order; the rest is the same.
      conv1d [conv_dim, 1, K] runs over the channels [q (nk*dk) | k (nk*dk) | v (nv*dv)], heads in order.
    """
    p = f"model.layers.{i}.linear_attn."
    t = x.shape[0]
    nk, nv, dk, dv, kern = m.lin_k_heads, m.lin_v_heads, m.lin_k_dim, m.lin_v_dim, m.conv_kernel
    r = nv // nk
    if m.split_proj:
        mixed, z = linear(m, x, p + "in_proj_qkv"), linear(m, x, p + "in_proj_z").view(t, nv, dv)
        b, a = linear(m, x, p + "in_proj_b"), linear(m, x, p + "in_proj_a")
    else:
        q, k, v, z = linear(m, x, p + "in_proj_qkvz").view(t, nk, 2 * dk + 2 * r * dv).split([dk, dk, r * dv, r * dv], -1)
        b, a = linear(m, x, p + "in_proj_ba").view(t, nk, 2 * r).split([r, r], dim=-1)
        b, a, z = b.reshape(t, nv), a.reshape(t, nv), z.reshape(t, nv, dv)
        mixed = torch.cat([q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1)], dim=-1)  # [T, conv_dim]
    # depthwise causal conv over time (zeros before t = 0), then SiLU
    w = m.weights[p + "conv1d.weight"][:, 0, :]  # [conv_dim, K]; tap K-1 multiplies the current token
    padded = torch.cat([torch.zeros(kern - 1, mixed.shape[1], dtype=mixed.dtype), mixed])
    mixed = torch.nn.functional.silu(sum(w[:, j] * padded[j:j + t] for j in range(kern)))
    q, k, v = mixed.split([nk * dk, nk * dk, nv * dv], dim=-1)
    q = l2_normalize(q.reshape(t, nk, dk)) / math.sqrt(dk)
    k = l2_normalize(k.reshape(t, nk, dk))
    q, k, v = q.repeat_interleave(r, dim=1), k.repeat_interleave(r, dim=1), v.reshape(t, nv, dv)
    beta = torch.sigmoid(b)  # [T, nv]
    decay = torch.exp(-torch.exp(m.weights[p + "A_log"]) * torch.nn.functional.softplus(a + m.weights[p + "dt_bias"]))
    state = torch.zeros(nv, dk, dv, dtype=x.dtype)  # per value head
    out = torch.empty(t, nv, dv, dtype=x.dtype)
    for s in range(t):  # the delta rule
        state = state * decay[s][:, None, None]
        delta = (v[s] - torch.einsum("hk,hkv->hv", k[s], state)) * beta[s][:, None]
        state = state + k[s][:, :, None] * delta[:, None, :]
        out[s] = torch.einsum("hk,hkv->hv", q[s], state)
    y = rms_norm(out, m.weights[p + "norm.weight"], m.eps) * torch.nn.functional.silu(z)  # gated, plain w
    return linear(m, y.reshape(t, nv * dv), p + "out_proj")


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
    mixer = linear_attention if m.mixers[i] == LINEAR else attention
    x = x + mixer(m, i, norm(m, x, p + "input_layernorm.weight"))
    h = norm(m, x, p + "post_attention_layernorm.weight")
    return x + (experts(m, i, h) if m.sparse[i] else mlp(m, i, h))


def forward(m, token_ids, hidden_states=False):
    """Logits float64 [T, V] for positions 0..T-1.

    With hidden_states=True returns (logits, states) where states is a list of
    n_layers + 1 tensors [T, H]: the input of each layer, then the final-norm output.
    """
    if m.arch == NEMOTRON_H:
        import nemotron_h_ref
        return nemotron_h_ref.forward(m, token_ids, hidden_states)
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    x = m.weights["model.embed_tokens.weight"][ids]
    states = []
    for i in range(m.n_layers):
        states.append(x)
        x = decoder_layer(m, i, x)
    x = norm(m, x, "model.norm.weight")
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
