"""The trainable Qwen3-Next decoder (plain PyTorch, float32), and its HF-layout I/O.

What it is for
  Training tiny Qwen3NextForCausalLM models whose state dict is a checkpoint: parameter names are
  those of the published per-expert layout (`model.layers.{i}.linear_attn.in_proj_qkvz.weight`,
  `model.layers.{i}.self_attn.q_proj.weight`, `model.layers.{i}.mlp.experts.{e}.gate_proj.weight`,
  `model.layers.{i}.mlp.shared_expert_gate.weight`, ...). save_hf_dir / load_hf_dir write and read
  config.json, generation_config.json and model.safetensors like llama.py's (whose helpers it uses).
  forward(ids [B, T]) -> logits [B, T, V] over whole sequences at positions 0..T-1 (no cache).

  Math (identical to tools/reference/transformer_ref.py; test_qwen3_next.py checks it in float64):
    - every RMSNorm except the DeltaNet's gated one is zero-centred: x*rsqrt(mean(x^2)+eps)*(1 + w);
    - layer i mixes tokens by gated full attention or by a gated DeltaNet, per `layer_types` (else
      every full_attention_interval-th layer, 1-based, is full attention);
    - gated attention: q_proj gives per head [query (hd) | gate (hd)]; zero-centred per-head q/k
      norms; rotate_half RoPE on the first head_dim * partial_rotary_factor dims of each head; causal
      softmax with grouped KV heads; output * sigmoid(gate) before o_proj;
    - gated DeltaNet (nk key heads of dk, nv value heads of dv, r = nv / nk): in_proj_qkvz gives per
      token nk groups [q (dk) | k (dk) | v (r*dv) | z (r*dv)], in_proj_ba nk groups [b (r) | a (r)];
      value head h reads key head h // r. Channels [q | k | v] go through a depthwise causal conv of
      K taps (tap K-1 on the current token) and SiLU; q, k are L2-normalised (eps 1e-6), q scaled by
      1/sqrt(dk); beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); per value head, from a
      zero state S [dk, dv]:  S = exp(g) S;  S += k ((v - k^T S) beta)^T;  o = q^T S.
      Then weight * rmsnorm(o) * silu(z) per value head (plain weight, not zero-centred), out_proj;
    - MoE layers (all but mlp_only_layers, and only every decoder_sparse_step-th): softmax router
      `mlp.gate`, each token's top-k experts weighted by their probabilities (renormalised when
      norm_topk_prob), SiLU experts, plus the shared expert scaled by sigmoid(shared_expert_gate . x);
      other layers a dense SwiGLU MLP.

  The delta rule runs in exact chunked form by default (delta_rule_chunked: within a chunk of C
  tokens a unit lower-triangular solve gives every token's update at once; algebraically identical
  to the token-by-token recurrence, which delta_rule_recurrent keeps as the plain definition and the
  test compares against). MoE dispatch gathers each expert's routed tokens and scatters the weighted
  outputs back: exact, and differentiable in the expert weights and the router (through the top-k
  probabilities; the top-k choice itself has no gradient). It is meant for training and checking
  tiny models, not for serving large ones.

  init_weights(model, std) is the starting point for training: Normal(0, std) linear/embedding
  weights (residual-branch outputs o_proj / out_proj / down_proj scaled by 1/sqrt(2 * layers)),
  zero-centred norms 0 (scale 1), gated-norm weight 1, conv taps U(-1/sqrt(K), 1/sqrt(K)),
  A_log = log(U(1, 16)) and dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1]
  (Mamba-2's choice: decays exp(-A*dt) from ~1 down to ~exp(-1.6), i.e. memories of a few to
  hundreds of tokens; HF's dt_bias = 1 would give decays <= exp(-1.3) per token at a = 0).

  Multi-token prediction: the model itself has no `mtp.*` module (qwen3_next_mtp.py holds the
  trainable one); load_hf_dir(..., mtp=True) splits a checkpoint's `mtp.*` tensors off and returns
  them beside the model, and save_hf_dir(..., extra_tensors=...) writes them into the same
  model.safetensors, as a published Qwen3-Next checkpoint ships them.

What it must not do
  Import transformers/safetensors or copy their code; differ from the reference math; run the
  multi-token-prediction (`mtp.*`) tensors itself (they are only split off or written through),
  a KV cache, sliding windows or attention biases.
"""

import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import MLP, causal_attention, write_json  # noqa: E402
from safetensors_io import read_model_dir, write_safetensors  # noqa: E402  (path set by llama)

FULL, LINEAR = "full_attention", "linear_attention"


@dataclass
class Qwen3NextConfig:
    """config.json's keys; defaults as Qwen3NextConfig's (num_key_value_heads must be given)."""
    vocab_size: int = 151936
    hidden_size: int = 2048
    intermediate_size: int = 5632
    num_hidden_layers: int = 48
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    layer_types: Optional[List[str]] = None  # resolved in __post_init__
    full_attention_interval: int = 4
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    num_experts: int = 512
    num_experts_per_tok: int = 10
    norm_topk_prob: bool = True
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    decoder_sparse_step: int = 1
    mlp_only_layers: List[int] = field(default_factory=list)
    bos_token_id: object = None
    eos_token_id: object = None

    def __post_init__(self):
        n = self.num_hidden_layers
        if self.layer_types is None:
            every = self.full_attention_interval
            self.layer_types = [LINEAR if (i + 1) % every else FULL for i in range(n)]
        self.layer_types = list(self.layer_types)
        self.mlp_only_layers = list(self.mlp_only_layers or [])
        if len(self.layer_types) != n or any(t not in (FULL, LINEAR) for t in self.layer_types):
            raise ValueError(f"bad layer_types {self.layer_types!r} for {n} layers")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError("linear_num_value_heads must be a multiple of linear_num_key_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        rot = self.rotary_dim
        if rot % 2 or not 0 < rot <= self.head_dim:
            raise ValueError(f"rotary dim {rot} of head_dim {self.head_dim}: must be even, in (0, head_dim]")

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.partial_rotary_factor)

    def is_sparse(self, i):
        return (i not in self.mlp_only_layers and self.num_experts > 0
                and (i + 1) % self.decoder_sparse_step == 0)

    def to_hf(self, torch_dtype="bfloat16"):
        cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_act": "silu",
               "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
               "initializer_range": 0.02, "rope_scaling": None, "use_cache": True,
               "router_aux_loss_coef": 0.001, "output_router_logits": False,
               "torch_dtype": torch_dtype, "transformers_version": "4.57.0"}
        cfg.update(asdict(self))
        return dict(sorted(cfg.items()))

    @classmethod
    def from_hf(cls, cfg):
        arch = (cfg.get("architectures") or ["Qwen3NextForCausalLM"])[0]
        if arch != "Qwen3NextForCausalLM":
            raise ValueError(f"not a Qwen3NextForCausalLM config: {arch!r}")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r}")
        for key in ("attention_bias", "use_sliding_window", "mlp_bias"):
            if cfg.get(key):
                raise ValueError(f"{key}=true is not supported")
        scaling = cfg.get("rope_scaling")
        if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
            raise ValueError(f"unsupported rope_scaling {scaling!r}")
        if "num_key_value_heads" not in cfg:
            raise ValueError("Qwen3NextForCausalLM config without num_key_value_heads")
        kw = {k: cfg[k] for k in cls.__dataclass_fields__ if cfg.get(k) is not None}
        return cls(**kw)


# ----------------------------------------------------------------------------- layers


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * (1 + w) when zero_centred (weight starts at 0), else * w."""

    def __init__(self, dim, eps, zero_centred=True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if zero_centred else torch.ones(dim))
        self.eps, self.zero_centred = eps, zero_centred

    def forward(self, x):
        w = 1.0 + self.weight if self.zero_centred else self.weight
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * w


def rope_cos_sin(t, rotary_dim, theta, dtype, device):
    """cos, sin [T, rotary_dim] (rotate_half layout), computed in float64, cast to dtype."""
    inv = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)
    angle = torch.arange(t, dtype=torch.float64, device=device)[:, None] * inv
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def apply_partial_rope(x, cos, sin):
    """x [B, T, heads, hd]: rotate_half RoPE on the first cos.shape[-1] dims, the rest pass through."""
    rot = cos.shape[-1]
    xr, rest = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    xr = xr * cos[:, None, :] + rotated * sin[:, None, :]
    return torch.cat([xr, rest], dim=-1) if rest.shape[-1] else xr


class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        h, hd = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(h, 2 * self.heads * hd, bias=False)  # per head [query | gate]
        self.k_proj = nn.Linear(h, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(hd, c.rms_norm_eps)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        hd = self.head_dim
        q, gate = self.q_proj(x).view(b, t, self.heads, 2 * hd).split(hd, dim=-1)
        k = self.k_proj(x).view(b, t, self.kv_heads, hd)
        v = self.v_proj(x).view(b, t, self.kv_heads, hd)
        q = apply_partial_rope(self.q_norm(q), cos, sin)
        k = apply_partial_rope(self.k_norm(k), cos, sin)
        out = causal_attention(q, k, v) * torch.sigmoid(gate.reshape(b, t, self.heads * hd))
        return self.o_proj(out)


def l2_normalize(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


def delta_rule_recurrent(q, k, v, g, beta):
    """The gated delta rule token by token. q, k [B, H, T, dk]; v [B, H, T, dv]; g, beta [B, H, T].

    From S = 0 [dk, dv] per (batch, head): S = exp(g_t) S; S += k_t ((v_t - k_t^T S) beta_t)^T;
    o_t = q_t^T S. Returns o [B, H, T, dv]."""
    b, h, t, dk = k.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    decay = g.exp()
    outs = []
    for s in range(t):
        state = state * decay[:, :, s, None, None]
        ks = k[:, :, s]
        delta = (v[:, :, s] - (ks.unsqueeze(-2) @ state).squeeze(-2)) * beta[:, :, s, None]
        state = state + ks.unsqueeze(-1) * delta.unsqueeze(-2)
        outs.append((q[:, :, s].unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(outs, dim=2)


def delta_rule_chunked(q, k, v, g, beta, chunk=64):
    """The same recurrence, exactly, a chunk of C tokens at a time (shapes as delta_rule_recurrent).

    With G_t = sum of g over the chunk up to t and S0 the state entering it, unrolling gives
      S_t = e^{G_t} S0 + sum_{s<=t} e^{G_t - G_s} k_s u_s^T,   u_t = beta_t (v_t - e^{G_t} S0^T k_t
            - sum_{s<t} e^{G_t - G_s} (k_t.k_s) u_s),
    i.e. (I + A) U = beta (V - e^G K S0) with A[t, s] = beta_t e^{G_t - G_s} k_t.k_s (s < t), a unit
    lower-triangular system; then o_t = e^{G_t} q_t^T S0 + sum_{s<=t} e^{G_t - G_s} (q_t.k_s) u_s and the
    next chunk's S0 = e^{G_C} S0 + sum_s e^{G_C - G_s} k_s u_s^T. Every exp argument is <= 0."""
    b, h, t, dk = k.shape
    dv = v.shape[-1]
    state = q.new_zeros(b, h, dk, dv)
    outs = []
    for lo in range(0, t, chunk):
        hi = min(t, lo + chunk)
        c = hi - lo
        qc, kc, vc, bc = q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], beta[:, :, lo:hi, None]
        cum = g[:, :, lo:hi].cumsum(-1)  # G_t [B, H, C]
        diff = cum[..., :, None] - cum[..., None, :]  # G_t - G_s
        lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        w_incl = diff.masked_fill(~lower, float("-inf")).exp()  # s <= t
        w_strict = w_incl * (~torch.eye(c, dtype=torch.bool, device=q.device))  # s < t
        a = bc * w_strict * (kc @ kc.transpose(-1, -2))
        eye = torch.eye(c, dtype=q.dtype, device=q.device)
        rhs = bc * (vc - cum.exp()[..., None] * (kc @ state))
        u = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
        outs.append(cum.exp()[..., None] * (qc @ state) + (w_incl * (qc @ kc.transpose(-1, -2))) @ u)
        last = cum[..., -1:]  # G_C [B, H, 1]
        state = last.exp()[..., None] * state + (kc * (last - cum).exp()[..., None]).transpose(-1, -2) @ u
    return torch.cat(outs, dim=2)


class GatedDeltaNet(nn.Module):
    def __init__(self, c, chunk=64):
        super().__init__()
        self.nk, self.nv = c.linear_num_key_heads, c.linear_num_value_heads
        self.dk, self.dv, self.kernel = c.linear_key_head_dim, c.linear_value_head_dim, c.linear_conv_kernel_dim
        self.chunk = chunk  # 0: token-by-token recurrence
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        conv_dim = 2 * nk * dk + nv * dv
        self.in_proj_qkvz = nn.Linear(c.hidden_size, 2 * nk * dk + 2 * nv * dv, bias=False)
        self.in_proj_ba = nn.Linear(c.hidden_size, 2 * nv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, self.kernel, groups=conv_dim, bias=False,
                                padding=self.kernel - 1)
        self.A_log = nn.Parameter(torch.zeros(nv))
        self.dt_bias = nn.Parameter(torch.ones(nv))
        self.norm = RMSNorm(dv, c.rms_norm_eps, zero_centred=False)
        self.out_proj = nn.Linear(nv * dv, c.hidden_size, bias=False)

    def forward(self, x):
        bsz, t, _ = x.shape
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        r = nv // nk
        q, k, v, z = self.in_proj_qkvz(x).view(bsz, t, nk, 2 * dk + 2 * r * dv).split([dk, dk, r * dv, r * dv], -1)
        b, a = self.in_proj_ba(x).view(bsz, t, nk, 2 * r).split([r, r], dim=-1)
        b, a, z = b.reshape(bsz, t, nv), a.reshape(bsz, t, nv), z.reshape(bsz, t, nv, dv)
        mixed = torch.cat([q.reshape(bsz, t, -1), k.reshape(bsz, t, -1), v.reshape(bsz, t, -1)], dim=-1)
        mixed = F.silu(self.conv1d(mixed.transpose(1, 2))[..., :t]).transpose(1, 2)  # causal: first T
        q, k, v = mixed.split([nk * dk, nk * dk, nv * dv], dim=-1)
        q = l2_normalize(q.reshape(bsz, t, nk, dk)) * (1.0 / math.sqrt(dk))
        k = l2_normalize(k.reshape(bsz, t, nk, dk))
        # -> [B, nv, T, d]; value head h reads key head h // r
        q = q.repeat_interleave(r, dim=2).transpose(1, 2)
        k = k.repeat_interleave(r, dim=2).transpose(1, 2)
        v = v.reshape(bsz, t, nv, dv).transpose(1, 2)
        beta = torch.sigmoid(b).transpose(1, 2)  # [B, nv, T]
        g = (-self.A_log.exp() * F.softplus(a + self.dt_bias)).transpose(1, 2)
        if self.chunk:
            o = delta_rule_chunked(q, k, v, g, beta, self.chunk)
        else:
            o = delta_rule_recurrent(q, k, v, g, beta)
        y = self.norm(o.transpose(1, 2)) * F.silu(z)  # [B, T, nv, dv]
        return self.out_proj(y.reshape(bsz, t, nv * dv))


class SparseMoE(nn.Module):
    """Router `gate`, `experts.{e}`, `shared_expert`, `shared_expert_gate` (HF's per-expert names)."""

    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.top_k, self.norm_topk_prob = c.num_experts_per_tok, c.norm_topk_prob
        self.gate = nn.Linear(h, c.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(h, c.moe_intermediate_size) for _ in range(c.num_experts))
        self.shared_expert = MLP(h, c.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(h, 1, bias=False)
        self.last_counts = None  # tokens routed to each expert by the latest forward

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.gate(x), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [N, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        counts = torch.bincount(chosen.reshape(-1), minlength=len(self.experts))
        self.last_counts = counts
        for e in counts.nonzero().flatten().tolist():
            tok, slot = (chosen == e).nonzero(as_tuple=True)
            out = out.index_add(0, tok, self.experts[e](x[tok]) * weights[tok, slot, None])
        out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, c, i, chunk):
        super().__init__()
        self.layer_type = c.layer_types[i]
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if self.layer_type == LINEAR:
            self.linear_attn = GatedDeltaNet(c, chunk)
        else:
            self.self_attn = GatedAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = SparseMoE(c) if c.is_sparse(i) else MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x, cos, sin):
        h = self.input_layernorm(x)
        x = x + (self.linear_attn(h) if self.layer_type == LINEAR else self.self_attn(h, cos, sin))
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c, chunk):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i, chunk) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class Qwen3NextForCausalLM(nn.Module):
    """Built from a Qwen3NextConfig or a config.json dict. chunk: DeltaNet chunk length (0 = the
    token-by-token recurrence)."""

    def __init__(self, config, chunk=64):
        super().__init__()
        if isinstance(config, dict):
            config = Qwen3NextConfig.from_hf(config)
        self.config = config
        self.model = Backbone(config, chunk)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def set_chunk(self, chunk):
        for layer in self.model.layers:
            if layer.layer_type == LINEAR:
                layer.linear_attn.chunk = chunk

    def head_weight(self):
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    def forward(self, ids, states=False):
        """ids [B, T] -> logits [B, T, V]; with states=True also the num_layers + 1 tensors [B, T, H]:
        each layer's input, then the final-norm output."""
        c = self.config
        x = self.model.embed_tokens(ids)
        cos, sin = rope_cos_sin(ids.shape[1], c.rotary_dim, c.rope_theta, x.dtype, x.device)
        inputs = []
        for layer in self.model.layers:
            inputs.append(x)
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        logits = x @ self.head_weight().T
        return (logits, inputs + [x]) if states else logits


@torch.no_grad()
def init_weights(model, std=0.02, generator=None, dt_min=1e-3, dt_max=1e-1):
    """Training start values (see the module docstring)."""
    out_std = std / math.sqrt(2 * model.config.num_hidden_layers)

    def normal(p, s):
        p.copy_(torch.randn(p.shape, generator=generator) * s)

    def uniform(p, lo, hi):
        p.copy_(torch.rand(p.shape, generator=generator, dtype=torch.float64) * (hi - lo) + lo)

    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.weight.fill_(0.0 if module.zero_centred else 1.0)
        elif isinstance(module, GatedDeltaNet):
            bound = 1.0 / math.sqrt(module.kernel)
            uniform(module.conv1d.weight, -bound, bound)
            a = torch.empty(module.A_log.shape, dtype=torch.float64)
            uniform(a, 1.0, 16.0)
            module.A_log.copy_(a.log())
            log_dt = torch.empty(module.dt_bias.shape, dtype=torch.float64)
            uniform(log_dt, math.log(dt_min), math.log(dt_max))
            dt = log_dt.exp()
            module.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
    for name, p in sorted(model.named_parameters()):
        if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
            normal(p, out_std)
        elif name.endswith(("proj.weight", "gate.weight", "embed_tokens.weight", "lm_head.weight")):
            normal(p, std)
    return model


# ----------------------------------------------------------------------------- HF-layout I/O


def hf_tensors(model, dtype):
    return {k: v.detach().to("cpu", dtype).contiguous() for k, v in sorted(model.state_dict().items())}


def save_hf_dir(model, directory, dtype=torch.bfloat16, extra_config=None, extra_tensors=None):
    """config.json + generation_config.json + model.safetensors. Tokenizer files are the caller's.
    extra_tensors: `mtp.*` tensors (written as given, in their own dtype) stored beside the model's."""
    extra_tensors = dict(extra_tensors or {})
    bad = sorted(k for k in extra_tensors if not k.startswith("mtp."))
    if bad:
        raise ValueError(f"extra tensors must be mtp.* ones: {bad[:3]}")
    os.makedirs(directory, exist_ok=True)
    tag = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}[dtype]
    cfg = model.config.to_hf(tag)
    cfg.update(extra_config or {})
    write_json(os.path.join(directory, "config.json"), cfg)
    write_json(os.path.join(directory, "generation_config.json"),
               {"bos_token_id": model.config.bos_token_id, "eos_token_id": model.config.eos_token_id,
                "do_sample": False, "transformers_version": "4.57.0"})
    tensors = hf_tensors(model, dtype)
    tensors.update({k: v.detach().to("cpu").contiguous() for k, v in extra_tensors.items()})
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)


def load_hf_dir(directory, device="cpu", chunk=64, mtp=False):
    """A float32 Qwen3NextForCausalLM from an HF-layout dir (weights upcast from their dtype).
    The tensor set must be exactly the model's: missing or unexpected tensors are errors, and so are
    `mtp.*` tensors unless mtp=True, which returns (model, {name: tensor as stored} of the `mtp.*`
    ones) instead (qwen3_next_mtp.load_mtp builds the module from them)."""
    with open(os.path.join(directory, "config.json")) as f:
        model = Qwen3NextForCausalLM(Qwen3NextConfig.from_hf(json.load(f)), chunk)
    stored = read_model_dir(directory)
    wanted = set(model.state_dict())
    mtp_tensors = {k: stored.pop(k) for k in sorted(stored) if k.startswith("mtp.")}
    if mtp_tensors and not mtp:
        raise ValueError(f"{directory}: multi-token-prediction tensors {sorted(mtp_tensors)[:3]}: "
                         "load with mtp=True to split them off")
    missing, extra = sorted(wanted - set(stored)), sorted(set(stored) - wanted)
    if missing or extra:
        raise ValueError(f"{directory}: missing tensors {missing[:5]}, unexpected {extra[:5]}")
    model.load_state_dict({k: stored[k].float() for k in wanted})
    model = model.to(device).eval()
    return (model, mtp_tensors) if mtp else model
