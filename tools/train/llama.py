"""The trainable Llama decoder of the bundled model family (plain PyTorch), and its HF-layout I/O.

What it is for
  train_lm.py trains the target and the draft with it; train_heads.py runs the frozen target with
  it (logits, every layer's input and the final-norm output); check_engine_greedy.py runs its greedy
  decoding as "the training framework's own output". Parameter names are Hugging Face's
  (`model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.weight`, ...), so a state dict
  is a checkpoint: save_hf_dir writes config.json, generation_config.json and model.safetensors
  (tools/fixtures/safetensors_io.py) in the layout Baton's loader and transformers read.

  Math (identical to tools/reference/transformer_ref.py, in float32): RMSNorm x*rsqrt(mean(x^2)+eps)*w;
  non-interleaved ("rotate_half") RoPE with inv_freq = theta^(-2i/head_dim); causal softmax
  attention with grouped KV heads (query head h reads KV head h // (heads/kv_heads)); SwiGLU MLP
  down(silu(gate(x)) * up(x)); no biases; optional tied embeddings.

What it must not do
  Import transformers/safetensors; differ from the reference math (check_engine_greedy.py and the
  reference's own tests catch that); hold anything but a decoder (heads live in heads.py).
"""

import json
import math
import os
import sys
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from safetensors_io import read_model_dir, write_safetensors  # noqa: E402


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    bos_token_id: int = 0
    eos_token_id: int = 0

    def to_hf(self, torch_dtype="bfloat16"):
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
               "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
               "initializer_range": 0.02, "pretraining_tp": 1, "rope_scaling": None, "use_cache": True,
               "torch_dtype": torch_dtype, "transformers_version": "4.46.0"}
        cfg.update(asdict(self))
        return dict(sorted(cfg.items()))

    @classmethod
    def from_hf(cls, cfg):
        names = cls.__dataclass_fields__
        kw = {k: cfg[k] for k in names if k in cfg}
        kw.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        return cls(**kw)

    def num_parameters(self):
        h, i, hd = self.hidden_size, self.intermediate_size, self.head_dim
        attn = h * hd * (2 * self.num_attention_heads + 2 * self.num_key_value_heads)
        layer = attn + 3 * h * i + 2 * h
        return self.num_hidden_layers * layer + self.vocab_size * h * (1 if self.tie_word_embeddings else 2) + h


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(positions, head_dim, theta):
    """cos, sin [*positions.shape, head_dim] for rotate_half RoPE."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim)
    angle = positions.to(torch.float64)[..., None] * inv
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos().float(), angle.sin().float()


def apply_rope(x, cos, sin):
    """x [..., T, heads, hd]; cos/sin [..., T, hd] (broadcast over heads)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(-2) + rotated * sin.unsqueeze(-2)


class Attention(nn.Module):
    """Self-attention whose input width may differ from the output width (EAGLE-3 reads 2H)."""

    def __init__(self, in_dim, out_dim, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, out_dim, bias=False)

    def qkv(self, x, cos, sin):
        """x [B, T, in] -> q [B, T, heads, hd], k, v [B, T, kv_heads, hd] (RoPE applied to q, k)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin):
        q, k, v = self.qkv(x, cos, sin)
        return self.o_proj(causal_attention(q, k, v))


def causal_attention(q, k, v):
    """q [B, T, H, hd], k/v [B, T, KV, hd] -> [B, T, H*hd], plain causal softmax attention."""
    b, t, h, hd = q.shape
    group = h // k.shape[2]
    q = (q * (1.0 / math.sqrt(hd))).transpose(1, 2)  # [B, H, T, hd]
    k = k.repeat_interleave(group, dim=2).transpose(1, 2)
    v = v.repeat_interleave(group, dim=2).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) + causal_bias(t, q.device)  # [B, H, T, T]
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, h * hd)


_BIAS = {}


def causal_bias(t, device):
    """[T, T] float: 0 where key <= query, -inf above the diagonal (cached per size)."""
    key = (t, str(device))
    if key not in _BIAS:
        _BIAS[key] = torch.full((t, t), float("-inf"), device=device).triu(1)
    return _BIAS[key]


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c.hidden_size, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                                   c.head_dim)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def init_weights(self, generator):
        """Normal(0, 0.02) everywhere; residual-branch outputs scaled by 1/sqrt(2 * layers)."""
        out_std = 0.02 / math.sqrt(2 * self.config.num_hidden_layers)
        for name, p in sorted(self.named_parameters()):
            with torch.no_grad():
                if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    std = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    def hidden_states(self, ids):
        """ids [B, T] -> the list of num_layers + 1 tensors [B, T, H]: the input of each layer (the
        residual stream entering it), then the final-norm output. No LM head."""
        c = self.config
        cos, sin = rope_cos_sin(torch.arange(ids.shape[1], device=ids.device), c.head_dim, c.rope_theta)
        x = self.model.embed_tokens(ids)
        inputs = []
        for layer in self.model.layers:
            inputs.append(x)
            x = layer(x, cos, sin)
        return inputs + [self.model.norm(x)]

    def forward(self, ids, states=False):
        """ids [B, T] -> logits [B, T, V]; with states=True also hidden_states(ids)."""
        hs = self.hidden_states(ids)
        logits = hs[-1] @ self.head_weight().T
        return (logits, hs) if states else logits

    @torch.no_grad()
    def greedy(self, prompt_ids, max_new_tokens, eos_ids=()):
        """Greedy decoding by full recomputation (no cache); stops after an EOS token (included)."""
        seq, out = list(prompt_ids), []
        for _ in range(max_new_tokens):
            token = int(self(torch.tensor([seq], device=self.head_weight().device))[0, -1].argmax())
            out.append(token)
            seq.append(token)
            if token in eos_ids:
                break
        return out


def hf_tensors(model, dtype):
    sd = model.state_dict()
    return {k: v.detach().to("cpu", dtype).contiguous() for k, v in sorted(sd.items())}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def save_hf_dir(model, directory, dtype=torch.bfloat16, extra_config=None):
    """config.json + generation_config.json + model.safetensors. Tokenizer files are the caller's."""
    os.makedirs(directory, exist_ok=True)
    tag = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[dtype]
    cfg = model.config.to_hf(tag)
    cfg.update(extra_config or {})
    write_json(os.path.join(directory, "config.json"), cfg)
    write_json(os.path.join(directory, "generation_config.json"),
               {"bos_token_id": model.config.bos_token_id, "eos_token_id": model.config.eos_token_id,
                "do_sample": False, "transformers_version": "4.46.0"})
    write_safetensors(os.path.join(directory, "model.safetensors"), hf_tensors(model, dtype))


def load_hf_dir(directory, device="cpu"):
    """A float32 LlamaForCausalLM from a dir save_hf_dir wrote (weights upcast from their dtype)."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = LlamaConfig.from_hf(json.load(f))
    model = LlamaForCausalLM(cfg)
    stored = read_model_dir(directory)
    wanted = {k for k in model.state_dict()}
    layer_names = {k for k in stored if k in wanted}
    missing = wanted - layer_names
    if missing:
        raise ValueError(f"{directory}: missing tensors {sorted(missing)[:5]}")
    model.load_state_dict({k: stored[k].float() for k in wanted})
    return model.to(device).eval()
