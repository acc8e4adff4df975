"""Trainable EAGLE-3 head and DeepSeek-V3-style MTP layer for the family's Llama target (PyTorch).

What it is for
  train_heads.py trains both with the target frozen, unrolled k steps the way they draft
  ("training-time test"); save_eagle3 / save_mtp write the exact layouts of
  models/baton-tiny-code/{eagle3,mtp} (docs/engine.md; names below are the checkpoint's names).
  tools/reference/draft_heads_ref.py is the independent float64 forward the engine is tested
  against; this file's math must equal it.

  EAGLE-3 (one step, norm_before_residual = false):
      x   = cat(input_layernorm(embed(token)), hidden_norm(h))             [2H]
      r   = h + o_proj(attn(q_proj(x), k_proj(x), v_proj(x)))              (residual is h itself)
      out = r + mlp(post_attention_layernorm(r))       -> fed back as h for the next step
      logits = lm_head(norm(out))  over the draft vocabulary; target id = d + d2t[d]
    First step: h = fc(cat(aux_0, aux_1, aux_2)), aux_i = the target's residual stream entering
    layer eagle_aux_hidden_state_layer_ids[i]. embed = the target's embed_tokens (not stored).
  MTP (DeepSeek-V3 / vLLM deepseek_mtp.py; one step):
      x   = eh_proj(cat(enorm(e), hnorm(h)))   e = embed(token), zeroed at position 0
      out = DecoderLayer(x)                    (standard pre-norm Llama block, residual x)
      logits = shared_head.head(shared_head.norm(out))  over the full vocabulary
    First step: h = the target's FINAL-NORM output (what vLLM's DeepseekV2Model.forward returns
    and its EAGLE/MTP proposer passes on); later steps: h = the previous step's `out` (pre-norm).
  Both: the token at position t+1 is paired with the hidden state at t, and the layer runs at
  position t; step j of a chain drafted from t runs at position t+j and attends to the first-step
  entries at positions <= t plus its own chain's later-step entries (what a KV cache holds while
  drafting, since verification rewrites accepted positions with first-step entries).

What it must not do
  Hold or update target weights (embed/lm_head come in as frozen tensors; the MTP copies written
  to disk are the target's own); change names or shapes of the layouts above.
"""

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from llama import MLP, Attention, RMSNorm, causal_bias, rope_cos_sin, write_json
from safetensors_io import write_safetensors


def chain_attention(q, k0, v0, ks, vs, chain_pos=None):
    """Attention of step-j queries of chains (the heads' drafting, unrolled for training).

    q [B, S, H, hd]: query of chain p (at position p + j). k0/v0 [B, P, KV, hd]: first-step
    entries at positions 0..P-1; chain p sees those at <= p. ks/vs: lists (steps 1..j) of
    [B, S, KV, hd], the chain's own later-step entries (each chain sees only its own row).
    chain_pos [S]: the p of each query row (None: S == P, row i is chain i). Returns [B, S, H*hd].
    """
    b, s, h, hd = q.shape
    p = k0.shape[1]
    group = h // k0.shape[2]

    def heads(x):  # [B, N, KV, hd] -> [B, H, N, hd]
        return x.repeat_interleave(group, dim=2).transpose(1, 2)

    if chain_pos is None:
        bias = causal_bias(p, q.device)
    else:
        allowed = torch.arange(p, device=q.device)[None, :] <= chain_pos[:, None]
        bias = torch.zeros(s, p, device=q.device).masked_fill(~allowed, float("-inf"))
    qh = (q * (1.0 / math.sqrt(hd))).transpose(1, 2)
    k0h, v0h = heads(k0), heads(v0)
    scores = [qh @ k0h.transpose(-1, -2) + bias]
    scores += [(qh * heads(k)).sum(-1, keepdim=True) for k in ks]
    probs = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
    out = probs[..., :p] @ v0h
    for i, v in enumerate(vs):
        out = out + probs[..., p + i:p + i + 1] * heads(v)
    return out.transpose(1, 2).reshape(b, s, h * hd)


class Midlayer(nn.Module):
    """EAGLE-3's single decoder layer: attention reads [2H], residual and MLP are H wide."""

    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.hidden_norm = RMSNorm(h, c["rms_norm_eps"])
        self.self_attn = Attention(2 * h, h, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.mlp = MLP(h, c["intermediate_size"])


class Eagle3Head(nn.Module):
    def __init__(self, config, draft_ids):
        """config: the eagle3 config.json dict; draft_ids: sorted target ids of the draft vocab."""
        super().__init__()
        c = self.config = config
        h = c["hidden_size"]
        self.fc = nn.Linear(3 * c["target_hidden_size"], h, bias=False)
        self.midlayer = Midlayer(c)
        self.norm = RMSNorm(h, c["rms_norm_eps"])
        self.lm_head = nn.Linear(h, c["draft_vocab_size"], bias=False)
        draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)
        self.register_buffer("draft_ids", draft_ids, persistent=False)
        t2d = torch.zeros(c["vocab_size"], dtype=torch.bool)
        t2d[draft_ids] = True
        self.register_buffer("t2d", t2d)
        self.register_buffer("d2t", draft_ids - torch.arange(len(draft_ids)))

    def step(self, emb, h, cos, sin, first_kv, chain_kv, chain_pos):
        """One drafting step for chains (all when first_kv is None). emb/h [B, S, H];
        returns (out, logits, (k, v))."""
        m = self.midlayer
        x = torch.cat([m.input_layernorm(emb), m.hidden_norm(h)], dim=-1)
        q, k, v = m.self_attn.qkv(x, cos, sin)
        if first_kv is None:
            first_kv, ks, vs = (k, v), [], []
        else:
            ks, vs = [kv[0] for kv in chain_kv] + [k], [kv[1] for kv in chain_kv] + [v]
        r = h + m.self_attn.o_proj(chain_attention(q, first_kv[0], first_kv[1], ks, vs, chain_pos))
        out = r + m.mlp(m.post_attention_layernorm(r))
        return out, self.lm_head(self.norm(out)), (k, v)

    def first_hidden(self, aux):
        return self.fc(aux)


class MtpLayer(nn.Module):
    def __init__(self, c, embed_weight, head_weight):
        """c: the target's LlamaConfig; embed/head: the frozen target tensors (copied on save)."""
        super().__init__()
        h = c.hidden_size
        self.enorm = RMSNorm(h, c.rms_norm_eps)
        self.hnorm = RMSNorm(h, c.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.input_layernorm = RMSNorm(h, c.rms_norm_eps)
        self.self_attn = Attention(h, h, c.num_attention_heads, c.num_key_value_heads, c.head_dim)
        self.post_attention_layernorm = RMSNorm(h, c.rms_norm_eps)
        self.mlp = MLP(h, c.intermediate_size)
        self.shared_head = nn.Module()
        self.shared_head.norm = RMSNorm(h, c.rms_norm_eps)
        self.register_buffer("embed_weight", embed_weight.detach().clone(), persistent=False)
        self.register_buffer("head_weight", head_weight.detach().clone(), persistent=False)

    def step(self, emb, h, cos, sin, first_kv, chain_kv, chain_pos):
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(h)], dim=-1))
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)
        if first_kv is None:
            first_kv, ks, vs = (k, v), [], []
        else:
            ks, vs = [kv[0] for kv in chain_kv] + [k], [kv[1] for kv in chain_kv] + [v]
        r = x + self.self_attn.o_proj(chain_attention(q, first_kv[0], first_kv[1], ks, vs, chain_pos))
        out = r + self.mlp(self.post_attention_layernorm(r))
        return out, self.shared_head.norm(out) @ self.head_weight.T, (k, v)


def unroll(head, embed_weight, ids, first_h, steps, head_dim, rope_theta, zero_pos0_embedding, chains=None):
    """Runs `steps` drafting steps for chains p of ids [B, T] (p = 0..T-2).

    first_h [B, T-1, H]: the first-step hidden state of chain p (from target position p). Step 0
    runs every chain (its entries are the keys all later steps read); steps >= 1 run the chains in
    `chains` (sorted LongTensor; None = all). Step j of chain p reads token ids[p + j + 1] (0 past
    the end) at position p + j. Returns (list of logits per step [B, S_j, V'], chain index tensor
    of steps >= 1); step j's logits for chain p predict the token at p + j + 2.
    """
    b, t = ids.shape
    p = t - 1
    padded = torch.cat([ids, ids.new_zeros(b, steps)], dim=1)
    emb = F.embedding(padded[:, 1:1 + p], embed_weight)
    if zero_pos0_embedding:
        emb = torch.cat([torch.zeros_like(emb[:, :1]), emb[:, 1:]], dim=1)
    cos, sin = rope_cos_sin(torch.arange(p, device=ids.device), head_dim, rope_theta)
    h, logits, first_kv = head.step(emb, first_h, cos, sin, None, [], None)
    out_logits = [logits]
    sel = torch.arange(p, device=ids.device) if chains is None else chains.to(ids.device)
    h, chain_kv = h[:, sel], []
    for j in range(1, steps):
        emb = F.embedding(padded[:, sel + j + 1], embed_weight)
        cos, sin = rope_cos_sin(sel + j, head_dim, rope_theta)
        h, logits, kv = head.step(emb, h, cos, sin, first_kv, chain_kv, sel)
        chain_kv.append(kv)
        out_logits.append(logits)
    return out_logits, sel


def eagle3_config(target_cfg, draft_vocab_size, aux_layers, intermediate_size=None):
    t = target_cfg
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "hidden_size": t.hidden_size, "intermediate_size": intermediate_size or t.intermediate_size,
            "num_attention_heads": t.num_attention_heads, "num_key_value_heads": t.num_key_value_heads,
            "head_dim": t.head_dim, "hidden_act": "silu", "rms_norm_eps": t.rms_norm_eps,
            "rope_theta": t.rope_theta, "rope_scaling": None, "max_position_embeddings": t.max_position_embeddings,
            "vocab_size": t.vocab_size, "draft_vocab_size": draft_vocab_size, "target_hidden_size": t.hidden_size,
            "eagle_aux_hidden_state_layer_ids": list(aux_layers), "norm_before_residual": False,
            "tie_word_embeddings": False, "bos_token_id": t.bos_token_id, "eos_token_id": t.eos_token_id,
            "torch_dtype": "bfloat16", "transformers_version": "4.46.0"}


def save_eagle3(head, directory, dtype=torch.bfloat16):
    os.makedirs(directory, exist_ok=True)
    tensors = {k: v.detach().cpu().to(dtype) for k, v in head.state_dict().items() if k not in ("d2t", "t2d")}
    tensors["d2t"] = head.d2t.detach().cpu().to(torch.int64)
    tensors["t2d"] = head.t2d.detach().cpu().to(torch.bool)
    write_json(os.path.join(directory, "config.json"), head.config)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)


def save_mtp(layer, target_cfg, directory, dtype=torch.bfloat16):
    """config.json = the target's + num_nextn_predict_layers: 1; tensors model.layers.{N}.* only."""
    os.makedirs(directory, exist_ok=True)
    cfg = target_cfg.to_hf("bfloat16" if dtype == torch.bfloat16 else "float32")
    cfg["num_nextn_predict_layers"] = 1
    prefix = f"model.layers.{target_cfg.num_hidden_layers}."
    tensors = {prefix + k: v.detach().cpu().to(dtype) for k, v in layer.state_dict().items()}
    tensors[prefix + "embed_tokens.weight"] = layer.embed_weight.detach().cpu().to(dtype)
    tensors[prefix + "shared_head.head.weight"] = layer.head_weight.detach().cpu().to(dtype)
    write_json(os.path.join(directory, "config.json"), cfg)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
