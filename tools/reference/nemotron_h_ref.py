"""Plain float64 PyTorch reference for NVIDIA's Nemotron-H (NemotronHForCausalLM).

What it is for
  The Nemotron-H half of tools/reference/transformer_ref.py: its build_model / load_model /
  forward / greedy / CLI dispatch here when config.json's architectures[0] is
  NemotronHForCausalLM, so fixtures and callers use transformer_ref.py alone.

  The model (published Hugging Face layout, `backbone.*` tensor names):
    x = backbone.embeddings[ids]; per layer i, one block whose kind is the i-th character of
    hybrid_override_pattern: x = x + mixer(rms_norm(x, layers.i.norm)), where mixer is
      M  a Mamba-2 mixer (mamba2(): in_proj -> [z | xBC | dt]; depthwise causal conv1d + SiLU
         on xBC -> [x | B | C]; dt = clamp(softplus(dt + dt_bias), time_step_limit); the SSD
         recurrence per head, token by token from a zero state, plus the D skip; the grouped
         RMSNorm gated by silu(z), norm after the gate; out_proj),
      *  causal GQA softmax attention with no positional encoding at all (no RoPE),
      -  an MLP down_proj(relu(up_proj(x))^2), no gate;
    then rms_norm(x, backbone.norm_f) and logits = x @ lm_head^T (the embeddings when tied).
  Every RMSNorm is the plain one, x * rsqrt(mean(x^2) + eps) * w, eps = layer_norm_epsilon.
  Everything runs in float64; no cache, every call recomputes positions 0..T-1.

What it must not do
  Import `transformers` or `safetensors`, or copy Hugging Face code: it is written from the
  math, as an independent check. It must not guess: MoE ('E') layers, activations other than
  relu2 / silu, in_proj / out_proj / MLP biases, and tensors it does not consume (or lacks) are
  errors. Config keys that only matter for initialisation or training (chunk_size, expand,
  time_step_min/max/floor, rescale_prenorm_residual, residual_in_fp32, ...) are ignored. It is
  for tiny models; speed is not a goal.
"""

import math
from dataclasses import dataclass, field

import torch

from transformer_ref import attention_mask, rms_norm

ARCH = "NemotronHForCausalLM"
MAMBA, ATTENTION, MLP = "M", "*", "-"  # hybrid_override_pattern characters
MAMBA_KEYS = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel")


@dataclass
class Model:
    config: dict
    arch: str
    hidden: int
    n_layers: int
    pattern: str  # one of MAMBA / ATTENTION / MLP per layer
    n_heads: int
    n_kv_heads: int
    head_dim: int
    attention_bias: bool
    intermediate: int
    eps: float
    weights: dict = field(repr=False)  # name -> float64 tensor
    eos_ids: list = field(default_factory=list)
    # Mamba-2 (0 when the pattern has no M layer)
    m_heads: int = 0  # nh
    m_head_dim: int = 0  # P
    state_size: int = 0  # N
    n_groups: int = 0  # G
    conv_kernel: int = 0  # K
    conv_bias: bool = True
    dt_limit: tuple = (0.0, math.inf)

    @property
    def m_inner(self):  # I = nh * P
        return self.m_heads * self.m_head_dim

    @property
    def conv_dim(self):  # channels of the conv: [x (I) | B (G*N) | C (G*N)]
        return self.m_inner + 2 * self.n_groups * self.state_size


# ----------------------------------------------------------------------------- config


def parse_pattern(cfg):
    pattern = cfg.get("hybrid_override_pattern")
    n_layers = cfg["num_hidden_layers"]
    if not isinstance(pattern, str) or len(pattern) != n_layers:
        raise ValueError(f"hybrid_override_pattern {pattern!r} must be a string of num_hidden_layers = "
                         f"{n_layers} characters")
    if "E" in pattern:
        raise ValueError(f"hybrid_override_pattern {pattern!r}: mixture-of-experts ('E') layers are not supported")
    bad = sorted(set(pattern) - {MAMBA, ATTENTION, MLP})
    if bad:
        raise ValueError(f"hybrid_override_pattern {pattern!r}: unknown layer kinds {bad} "
                         f"(supported: 'M' Mamba-2, '*' attention, '-' MLP)")
    return pattern


def head_dim_of(cfg, hidden, n_heads):
    """head_dim, else attention_head_dim, else hidden_size // num_attention_heads."""
    hd, ahd = cfg.get("head_dim"), cfg.get("attention_head_dim")
    if hd and ahd and hd != ahd:
        raise ValueError(f"head_dim {hd} != attention_head_dim {ahd}")
    return hd or ahd or hidden // n_heads


def check_supported(cfg, pattern):
    def require(key, want, default):
        got = cfg.get(key, default)
        if got != want:
            raise ValueError(f"NemotronH: unsupported {key}={got!r} (only {want!r})")

    require("mlp_hidden_act", "relu2", "relu2")
    require("mlp_bias", False, False)
    if MAMBA in pattern:
        require("mamba_hidden_act", "silu", "silu")
        require("use_bias", False, False)  # in_proj / out_proj biases
        require("mamba_proj_bias", False, False)
        missing = [k for k in MAMBA_KEYS if k not in cfg]
        if missing:
            raise ValueError(f"NemotronH config with Mamba layers lacks {missing}")
    if ATTENTION in pattern and "num_key_value_heads" not in cfg:
        raise ValueError("NemotronH config with attention layers lacks num_key_value_heads")


def time_step_limit(cfg):
    limit = cfg.get("time_step_limit", [0.0, math.inf])
    if limit is None:
        limit = [0.0, math.inf]
    if len(limit) != 2 or not float(limit[0]) <= float(limit[1]):
        raise ValueError(f"time_step_limit {limit!r}: expected [lo, hi] with lo <= hi")
    return float(limit[0]), float(limit[1])


def tensor_shapes(m, tied):
    """name -> shape of every tensor the model consumes, in a fixed order."""
    h, vocab = m.hidden, m.config["vocab_size"]
    shapes = {"backbone.embeddings.weight": [vocab, h], "backbone.norm_f.weight": [h]}
    if not tied:
        shapes["lm_head.weight"] = [vocab, h]
    q_out, kv_out = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
    for i, kind in enumerate(m.pattern):
        p = f"backbone.layers.{i}."
        shapes[p + "norm.weight"] = [h]
        p += "mixer."
        if kind == MAMBA:
            nh, inner = m.m_heads, m.m_inner
            shapes.update({p + "in_proj.weight": [inner + m.conv_dim + nh, h],
                           p + "conv1d.weight": [m.conv_dim, 1, m.conv_kernel],
                           p + "A_log": [nh], p + "D": [nh], p + "dt_bias": [nh],
                           p + "norm.weight": [inner], p + "out_proj.weight": [h, inner]})
            if m.conv_bias:
                shapes[p + "conv1d.bias"] = [m.conv_dim]
        elif kind == ATTENTION:
            shapes.update({p + "q_proj.weight": [q_out, h], p + "k_proj.weight": [kv_out, h],
                           p + "v_proj.weight": [kv_out, h], p + "o_proj.weight": [h, q_out]})
            if m.attention_bias:
                shapes.update({p + "q_proj.bias": [q_out], p + "k_proj.bias": [kv_out],
                               p + "v_proj.bias": [kv_out], p + "o_proj.bias": [h]})
        else:
            shapes.update({p + "up_proj.weight": [m.intermediate, h],
                           p + "down_proj.weight": [h, m.intermediate]})
    return shapes


def build_model(cfg, stored, eos_ids=()):
    """Model from a config dict and dict name -> tensor (any float dtype, as stored)."""
    arch = cfg["architectures"][0]
    if arch != ARCH:
        raise ValueError(f"not a {ARCH}: {arch!r}")
    pattern = parse_pattern(cfg)
    check_supported(cfg, pattern)
    hidden, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    m = Model(
        config=cfg,
        arch=arch,
        hidden=hidden,
        n_layers=len(pattern),
        pattern=pattern,
        n_heads=n_heads,
        n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
        head_dim=head_dim_of(cfg, hidden, n_heads),
        attention_bias=bool(cfg.get("attention_bias", False)),
        intermediate=cfg.get("intermediate_size", 0),
        eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
        weights={},
        eos_ids=sorted(eos_ids),
    )
    if n_heads % m.n_kv_heads:
        raise ValueError(f"num_attention_heads {n_heads} not a multiple of num_key_value_heads {m.n_kv_heads}")
    if MAMBA in pattern:
        m.m_heads, m.m_head_dim, m.state_size, m.n_groups, m.conv_kernel = (int(cfg[k]) for k in MAMBA_KEYS)
        m.conv_bias = bool(cfg.get("use_conv_bias", True))
        m.dt_limit = time_step_limit(cfg)
        if m.m_heads % m.n_groups:
            raise ValueError(f"mamba_num_heads {m.m_heads} not a multiple of n_groups {m.n_groups}")
    tied = bool(cfg.get("tie_word_embeddings", False))
    shapes = tensor_shapes(m, tied)
    missing = [n for n in shapes if n not in stored]
    extra = sorted(set(stored) - set(shapes))
    if missing or extra:
        raise ValueError(f"NemotronH tensor mismatch: missing {missing[:5]}, unexpected {extra[:5]}")
    for n, shape in shapes.items():
        if list(stored[n].shape) != shape:
            raise ValueError(f"{n}: shape {list(stored[n].shape)}, expected {shape}")
    m.weights = {n: stored[n].to(torch.float64) for n in shapes}
    if tied:
        m.weights["lm_head.weight"] = m.weights["backbone.embeddings.weight"]
    return m


# ----------------------------------------------------------------------------- math


def linear(m, x, prefix, bias=False):
    y = x @ m.weights[prefix + ".weight"].T
    return y + m.weights[prefix + ".bias"] if bias else y


def causal_conv(x, weight, bias=None):
    """Depthwise causal conv over time: x [T, C], weight [C, 1, K], tap K-1 on the current token,
    zeros before t = 0."""
    t, kern = x.shape[0], weight.shape[-1]
    w = weight[:, 0, :]
    padded = torch.cat([torch.zeros(kern - 1, x.shape[1], dtype=x.dtype), x])
    out = sum(w[:, j] * padded[j:j + t] for j in range(kern))
    return out if bias is None else out + bias


def ssm_scan(x, dt, A, B, C, D):
    """The Mamba-2 (SSD) recurrence, token by token from a zero state.

    x [T, nh, P], dt [T, nh] (after softplus and clamp), A [nh] (negative), B and C [T, G, N],
    D [nh]; head h reads group h // (nh / G). Per head: S [P, N] = 0, then for each t
      S = exp(dt[t] A) S + dt[t] outer(x[t], B[t]);  y[t] = S @ C[t] + D x[t].
    Returns y [T, nh, P]."""
    t, nh, p = x.shape
    g, n = B.shape[1], B.shape[2]
    group = torch.arange(nh) // (nh // g)
    Bh, Ch = B[:, group], C[:, group]  # [T, nh, N]
    state = torch.zeros(nh, p, n, dtype=x.dtype)
    y = torch.empty_like(x)
    for s in range(t):
        decay = torch.exp(dt[s] * A)  # [nh]
        state = decay[:, None, None] * state + (dt[s][:, None] * x[s])[:, :, None] * Bh[s][:, None, :]
        y[s] = torch.einsum("hpn,hn->hp", state, Ch[s]) + D[:, None] * x[s]
    return y


def gated_group_rms_norm(y, z, weight, n_groups, eps):
    """norm_before_gate=False: u = y * silu(z), RMS-normalised over each of n_groups contiguous
    channel groups, times weight. y, z [T, I]."""
    u = y * torch.nn.functional.silu(z)
    t, inner = u.shape
    grouped = u.view(t, n_groups, inner // n_groups)
    normed = grouped * torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + eps)
    return normed.reshape(t, inner) * weight


def mamba2(m, i, x):
    """The Mamba-2 mixer over the normed sequence x [T, H], from a zero state."""
    p = f"backbone.layers.{i}.mixer."
    t = x.shape[0]
    nh, hp, n, g, inner = m.m_heads, m.m_head_dim, m.state_size, m.n_groups, m.m_inner
    z, xbc, dt = linear(m, x, p + "in_proj").split([inner, m.conv_dim, nh], dim=-1)
    xbc = torch.nn.functional.silu(causal_conv(xbc, m.weights[p + "conv1d.weight"],
                                               m.weights[p + "conv1d.bias"] if m.conv_bias else None))
    xs, B, C = xbc.split([inner, g * n, g * n], dim=-1)
    dt = torch.nn.functional.softplus(dt + m.weights[p + "dt_bias"]).clamp(m.dt_limit[0], m.dt_limit[1])
    A = -torch.exp(m.weights[p + "A_log"])
    y = ssm_scan(xs.view(t, nh, hp), dt, A, B.view(t, g, n), C.view(t, g, n), m.weights[p + "D"])
    y = gated_group_rms_norm(y.reshape(t, inner), z, m.weights[p + "norm.weight"], g, m.eps)
    return linear(m, y, p + "out_proj")


def attention(m, i, x):
    """Causal GQA softmax attention, scale head_dim^-0.5, no positional encoding."""
    p = f"backbone.layers.{i}.mixer."
    t, hd, bias = x.shape[0], m.head_dim, m.attention_bias
    q = linear(m, x, p + "q_proj", bias).view(t, m.n_heads, hd)
    k = linear(m, x, p + "k_proj", bias).view(t, m.n_kv_heads, hd)
    v = linear(m, x, p + "v_proj", bias).view(t, m.n_kv_heads, hd)
    group = m.n_heads // m.n_kv_heads  # query head h reads kv head h // group
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    scores = scores.masked_fill(~attention_mask(t, None), float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v).reshape(t, m.n_heads * hd)
    return linear(m, out, p + "o_proj", bias)


def mlp(m, i, x):
    p = f"backbone.layers.{i}.mixer."
    return linear(m, torch.relu(linear(m, x, p + "up_proj")).pow(2), p + "down_proj")


MIXERS = {MAMBA: mamba2, ATTENTION: attention, MLP: mlp}


def forward(m, token_ids, hidden_states=False):
    """Logits float64 [T, V]; with hidden_states=True (logits, states): the n_layers + 1 tensors
    [T, H] of each block's input (the residual stream), then the final norm's output."""
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    x = m.weights["backbone.embeddings.weight"][ids]
    states = []
    for i, kind in enumerate(m.pattern):
        states.append(x)
        x = x + MIXERS[kind](m, i, rms_norm(x, m.weights[f"backbone.layers.{i}.norm.weight"], m.eps))
    x = rms_norm(x, m.weights["backbone.norm_f.weight"], m.eps)
    states.append(x)
    logits = x @ m.weights["lm_head.weight"].T
    return (logits, states) if hidden_states else logits
