"""Trainable DFlash block drafter for the family's Llama target (PyTorch), and its checkpoint I/O.

What it is for
  train_dflash.py trains it with the target frozen; save_dflash writes the published DFlash layout
  (z-lab's DFlashDraftModel, what vLLM's "method": "dflash" and Baton's DFlashDrafter load:
  engine/spec/dflash_drafter.cc, docs/engine.md); load_dflash reads it back.
  tools/reference/dflash_ref.py is the independent float64 forward the engine is tested against;
  this file's math must equal it (test_dflash.py checks it, also for many anchors in one forward).

  Context (per target position p, once per window): F_p = cat over id in target_layer_ids (listed
  order) of the target's states[id + 1] (llama.py's states: the input of layer id + 1 = layer id's
  output, or for the last layer the final-norm output); cn = hidden_norm(fc(F)); per draft layer
  the context keys k_norm(k_proj(cn)) with RoPE at p and values v_proj(cn) (no input_layernorm).
  Block at anchor a, L <= block_size tokens: [x_a, m, ..., m] (m = mask_token_id) at positions
  a .. a+L-1, embedded with the target's embedding (or the drafter's own embed_tokens); each draft
  layer is a Qwen3 pre-norm layer (input_layernorm, q/k/v, per-head q_norm/k_norm, RoPE, o_proj,
  post_attention_layernorm, SwiGLU MLP) whose block queries attend, non-causally, to the context
  keys at positions < a and to all L keys of their own block. logits = lm_head(norm(x)): the
  target's head, or the drafter's own over a draft vocabulary (target id = d + d2t[d]). Block row j
  (1..L-1) drafts the token at a + j. block_hidden() / block_logits() compute any number of anchors
  per window in one forward (each block sees only its own keys and its own context prefix): what
  training and inference compute is the same function.
  Initialisation: init_drafter() (seeded, optionally a target layer's weights in every draft
  layer), then init_from_eagle3() where a trained EAGLE-3 head fits (same draft vocabulary, its aux
  layers listed first): build_family.py's `dflash` stage starts from the family's OUT/eagle3.
  Checkpoint: config.json {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", the layer
  geometry, "vocab_size" (the target's), "num_target_layers", "dflash_config": {"mask_token_id",
  "target_layer_ids", "block_size"}, optional "draft_vocab_size"}; model.safetensors (BF16, no
  "model." prefix): layers.{i}.*, fc.weight, hidden_norm.weight, norm.weight, optional
  lm_head.weight + d2t (I64) and embed_tokens.weight.

What it must not do
  Hold or update target weights (its embedding and head come in as frozen copies, kept as
  non-persistent buffers and never written unless the drafter ships its own); change names or
  shapes of the layout above; write keys the loaders would misread (causal, is_causal, biases);
  import the `safetensors` package.
"""

import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from llama import MLP, RMSNorm, apply_rope, rope_cos_sin, write_json
from safetensors_io import read_safetensors, write_safetensors


class DFlashAttention(nn.Module):
    def __init__(self, h, heads, kv_heads, head_dim, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(h, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(h, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(h, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, h, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def kv(self, x, cos, sin):
        """x [..., N, H] -> keys (normed, RoPE) and values [..., N, kv_heads, hd]."""
        shape = x.shape[:-1] + (self.kv_heads, self.head_dim)
        k = apply_rope(self.k_norm(self.k_proj(x).view(shape)), cos, sin)
        return k, self.v_proj(x).view(shape)


class DFlashLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = DFlashAttention(h, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = MLP(h, c["intermediate_size"])

    def forward(self, x, cos, sin, ctx_k, ctx_v, ctx_bias):
        """x [b, A, L, H]: A blocks of L tokens per window; cos/sin [b, A, L, hd]; ctx_k/ctx_v
        [b, T, kv, hd]: the window's context keys/values; ctx_bias [b, A, T]: 0 where block a may see
        context position t (t < anchor), -inf elsewhere. Non-causal inside a block."""
        at = self.self_attn
        b, a, L, _ = x.shape
        t = ctx_k.shape[1]
        group = at.heads // at.kv_heads
        hn = self.input_layernorm(x)
        q = apply_rope(at.q_norm(at.q_proj(hn).view(b, a, L, at.heads, at.head_dim)), cos, sin)
        k_blk, v_blk = at.kv(hn, cos, sin)  # [b, A, L, kv, hd]
        q = q * (1.0 / math.sqrt(at.head_dim))
        # queries grouped per KV head: [b, kv, g, A, L, hd]
        qg = q.view(b, a, L, at.kv_heads, group, at.head_dim).permute(0, 3, 4, 1, 2, 5)
        kc = ctx_k.permute(0, 2, 1, 3)  # [b, kv, T, hd]
        vc = ctx_v.permute(0, 2, 1, 3)
        s_ctx = (qg.reshape(b, at.kv_heads, group * a * L, at.head_dim) @ kc.transpose(-1, -2))
        s_ctx = s_ctx.view(b, at.kv_heads, group, a, L, t) + ctx_bias[:, None, None, :, None, :]
        kb = k_blk.permute(0, 3, 1, 2, 4)[:, :, None]  # [b, kv, 1, A, L, hd]
        vb = v_blk.permute(0, 3, 1, 2, 4)[:, :, None]
        s_blk = qg @ kb.transpose(-1, -2)  # [b, kv, g, A, L, L]
        probs = torch.softmax(torch.cat([s_ctx, s_blk], dim=-1), dim=-1)
        out = (probs[..., :t].reshape(b, at.kv_heads, group * a * L, t) @ vc).view(b, at.kv_heads, group, a, L, -1)
        out = out + probs[..., t:] @ vb
        out = out.permute(0, 3, 4, 1, 2, 5).reshape(b, a, L, at.heads * at.head_dim)
        x = x + at.o_proj(out)
        return x + self.mlp(self.post_attention_layernorm(x))


def dflash_config(target_cfg, *, layers, target_layer_ids, block_size, mask_token_id, draft_vocab_size=None,
                  intermediate_size=None):
    """The drafter's config.json dict; its layer geometry is the target's (hidden size must match)."""
    t = target_cfg
    ids = list(target_layer_ids)
    if not ids or len(set(ids)) != len(ids) or not all(0 <= i < t.num_hidden_layers for i in ids):
        raise ValueError(f"target_layer_ids {ids} invalid for {t.num_hidden_layers} target layers")
    if t.num_hidden_layers - 1 in ids[:-1]:
        raise ValueError("the target's last layer (its final-norm output) must be listed last")
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": t.hidden_size,
           "num_hidden_layers": layers, "num_attention_heads": t.num_attention_heads,
           "num_key_value_heads": t.num_key_value_heads, "head_dim": t.head_dim,
           "intermediate_size": intermediate_size or t.intermediate_size, "rms_norm_eps": t.rms_norm_eps,
           "rope_theta": t.rope_theta, "max_position_embeddings": t.max_position_embeddings,
           "vocab_size": t.vocab_size, "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
           "num_target_layers": t.num_hidden_layers,
           "dflash_config": {"mask_token_id": int(mask_token_id), "target_layer_ids": ids,
                             "block_size": int(block_size)},
           "bos_token_id": t.bos_token_id, "eos_token_id": t.eos_token_id, "torch_dtype": "bfloat16"}
    if draft_vocab_size is not None:
        cfg["draft_vocab_size"] = int(draft_vocab_size)
    return cfg


class DFlashDrafter(nn.Module):
    def __init__(self, config, target_embed, target_head=None, draft_ids=None, own_embed=False):
        """config: the config.json dict. target_embed [V, H] / target_head [V, H]: the frozen target
        tensors (copied into non-persistent buffers). draft_ids: sorted target ids of an own lm_head
        over the draft vocabulary (config draft_vocab_size); None: the target's head. own_embed: ship
        embed_tokens.weight (initialised to the target's, trainable)."""
        super().__init__()
        c = self.config = config
        h = c["hidden_size"]
        dc = c["dflash_config"]
        self.target_layer_ids = list(dc["target_layer_ids"])
        self.block_size, self.mask_token_id = dc["block_size"], dc["mask_token_id"]
        self.layers = nn.ModuleList(DFlashLayer(c) for _ in range(c["num_hidden_layers"]))
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, c["rms_norm_eps"])
        self.norm = RMSNorm(h, c["rms_norm_eps"])
        if own_embed:
            self.embed_tokens = nn.Embedding(c["vocab_size"], h)
            with torch.no_grad():
                self.embed_tokens.weight.copy_(target_embed)
        else:
            self.register_buffer("target_embed", target_embed.detach().clone().float(), persistent=False)
        if draft_ids is not None:
            draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)
            if c.get("draft_vocab_size") != len(draft_ids):
                raise ValueError(f"draft_vocab_size {c.get('draft_vocab_size')} != {len(draft_ids)} draft ids")
            self.lm_head = nn.Linear(h, len(draft_ids), bias=False)
        else:
            if c.get("draft_vocab_size") not in (None, c["vocab_size"]):
                raise ValueError("a draft vocabulary needs draft_ids")
            self.register_buffer("target_head", target_head.detach().clone().float(), persistent=False)
            draft_ids = torch.arange(c["vocab_size"])
        self.register_buffer("draft_ids", draft_ids, persistent=False)  # logit index -> target id
        in_draft = torch.zeros(c["vocab_size"], dtype=torch.bool)
        in_draft[draft_ids] = True
        self.register_buffer("in_draft", in_draft, persistent=False)

    @property
    def own_head(self):
        return isinstance(getattr(self, "lm_head", None), nn.Linear)

    def embed_weight(self):
        return self.embed_tokens.weight if hasattr(self, "embed_tokens") else self.target_embed

    def features(self, states):
        """states: llama.LlamaForCausalLM's list (layer inputs, then the final-norm output) ->
        F [b, T, len(ids) * H] (states[id + 1] for each id)."""
        return torch.cat([states[i + 1] for i in self.target_layer_ids], dim=-1)

    def context(self, feats):
        """F [b, T, len(ids) H] -> per draft layer (keys [b, T, kv, hd] with RoPE at 0..T-1, values)."""
        c = self.config
        cn = self.hidden_norm(self.fc(feats))
        cos, sin = rope_cos_sin(torch.arange(feats.shape[1], device=feats.device), c["head_dim"], c["rope_theta"])
        return [layer.self_attn.kv(cn, cos, sin) for layer in self.layers]

    def block_hidden(self, ids, anchors, ctx, length=None):
        """ids [b, T]; anchors [b, A] (1 <= a < T); ctx: context() of the same windows. Returns
        norm(x) [b, A, L, H] of the blocks [ids[a], mask * (L-1)] at positions a .. a+L-1 (L = length
        or block_size); block a sees context positions < a and its own L keys."""
        c = self.config
        L = length or self.block_size
        b, a = anchors.shape
        t = ctx[0][0].shape[1]
        tokens = torch.full((b, a, L), self.mask_token_id, dtype=torch.long, device=ids.device)
        tokens[..., 0] = ids.gather(1, anchors)
        pos = anchors[..., None] + torch.arange(L, device=ids.device)
        cos, sin = rope_cos_sin(pos, c["head_dim"], c["rope_theta"])
        x = F.embedding(tokens, self.embed_weight())
        visible = torch.arange(t, device=ids.device)[None, None, :] < anchors[..., None]
        bias = torch.zeros(visible.shape, device=ids.device).masked_fill(~visible, float("-inf"))
        for layer, (k, v) in zip(self.layers, ctx):
            x = layer(x, cos, sin, k, v, bias)
        return self.norm(x)

    def head(self, out):
        """Logits [..., D] of norm(x) [..., H]: the own lm_head or the target's."""
        return self.lm_head(out) if self.own_head else out @ self.target_head.T

    def block_logits(self, ids, anchors, ctx, length=None):
        """Logits [b, A, L, D] of every block row (block_hidden's blocks)."""
        return self.head(self.block_hidden(ids, anchors, ctx, length))

    def drafts(self, logits):
        """Greedy drafts as target ids from logits [..., D]."""
        return self.draft_ids[logits.argmax(-1)]


def init_drafter(drafter, target, seed, from_layer=None, fc_identity=False, zero_mask=False):
    """Seeded Normal(0, 0.02) matrices (o/down scaled by 1/sqrt(2 * layers)), ones for norms; the
    final norm from the target's; an own lm_head from the target's rows of the draft vocabulary.
    from_layer: every draft layer's attention/MLP/norm weights copied from that target layer (q/k
    norms stay ones). fc_identity: fc reads the last listed target state as it is (identity on its
    block, zero elsewhere), so the context starts as that state. zero_mask: the own embed_tokens'
    mask row starts at zero (the mask slots then start empty, not as a token's embedding)."""
    g = torch.Generator().manual_seed(seed)
    out_std = 0.02 / math.sqrt(2 * len(drafter.layers))
    with torch.no_grad():
        for name, p in sorted(drafter.named_parameters()):
            if name == "embed_tokens.weight":
                continue
            if p.dim() < 2:
                p.fill_(1.0)
            else:
                std = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)
        drafter.norm.weight.copy_(target.model.norm.weight)
        if drafter.own_head:
            drafter.lm_head.weight.copy_(target.head_weight()[drafter.draft_ids.to(target.head_weight().device)])
        if from_layer is not None:
            src = target.model.layers[from_layer].state_dict()
            for layer in drafter.layers:
                own = layer.state_dict()
                layer.load_state_dict({k: src[k].clone() if k in src else v for k, v in own.items()})
        if fc_identity:
            h = drafter.fc.weight.shape[0]
            drafter.fc.weight.zero_()
            drafter.fc.weight[:, -h:] = torch.eye(h)
        if zero_mask:
            drafter.embed_tokens.weight[drafter.mask_token_id] = 0.0


def init_from_eagle3(drafter, eagle_dir):
    """Start from a trained EAGLE-3 head (heads.save_eagle3's layout, e.g. the family's OUT/eagle3)
    where the two agree: the drafter must have its own lm_head over the same draft vocabulary and
    list the head's aux layers first (EAGLE-3's aux id i, the input of layer i, is DFlash's id
    i - 1). Copied: fc (onto those layers' columns; other columns zero), hidden_norm, norm, lm_head,
    and into every draft layer input_layernorm, post_attention_layernorm, the MLP, o_proj, k/v_proj
    (the columns that read EAGLE-3's hidden half: the context's keys and values are read from
    hidden_norm(fc(F)) as EAGLE-3's are) and q_proj (the sum of its two halves: a block row's query
    reads one vector, an EAGLE-3 position's reads its token and its hidden state). Returns a reason
    string when the head does not fit (nothing is changed then), else None."""
    with open(os.path.join(eagle_dir, "config.json")) as f:
        cfg = json.load(f)
    stored = read_safetensors(os.path.join(eagle_dir, "model.safetensors"))
    e = {k: v.float() for k, v in stored.items() if v.dtype.is_floating_point}
    h = drafter.config["hidden_size"]
    aux = [i - 1 for i in cfg.get("eagle_aux_hidden_state_layer_ids", [])]
    if not drafter.own_head:
        return "the drafter uses the target's head"
    if "d2t" not in stored or not torch.equal(torch.arange(len(stored["d2t"])) + stored["d2t"].long(),
                                              drafter.draft_ids.cpu()):
        return "another draft vocabulary"
    if drafter.target_layer_ids[:len(aux)] != aux or cfg.get("hidden_size") != h or cfg.get("norm_before_residual"):
        return f"aux layers {aux} / hidden size {cfg.get('hidden_size')} do not match"
    if e["midlayer.mlp.gate_proj.weight"].shape != drafter.layers[0].mlp.gate_proj.weight.shape:
        return "another MLP size"
    m = "midlayer."
    with torch.no_grad():
        drafter.fc.weight.zero_()
        drafter.fc.weight[:, :len(aux) * h] = e["fc.weight"]
        drafter.hidden_norm.weight.copy_(e[m + "hidden_norm.weight"])
        drafter.norm.weight.copy_(e["norm.weight"])
        drafter.lm_head.weight.copy_(e["lm_head.weight"])
        for layer in drafter.layers:
            at = layer.self_attn
            layer.input_layernorm.weight.copy_(e[m + "input_layernorm.weight"])
            layer.post_attention_layernorm.weight.copy_(e[m + "post_attention_layernorm.weight"])
            for n in ("gate_proj", "up_proj", "down_proj"):
                getattr(layer.mlp, n).weight.copy_(e[m + "mlp." + n + ".weight"])
            at.o_proj.weight.copy_(e[m + "self_attn.o_proj.weight"])
            at.k_proj.weight.copy_(e[m + "self_attn.k_proj.weight"][:, h:])
            at.v_proj.weight.copy_(e[m + "self_attn.v_proj.weight"][:, h:])
            q = e[m + "self_attn.q_proj.weight"]
            at.q_proj.weight.copy_(q[:, :h] + q[:, h:])
    return None


def save_dflash(drafter, directory, dtype=torch.bfloat16):
    os.makedirs(directory, exist_ok=True)
    tensors = {k: v.detach().cpu().to(dtype) for k, v in drafter.state_dict().items()}
    if drafter.own_head:
        d = drafter.draft_ids.detach().cpu()
        tensors["d2t"] = (d - torch.arange(len(d))).to(torch.int64)
    write_json(os.path.join(directory, "config.json"), drafter.config)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)


def load_dflash(directory, target):
    """A float32 DFlashDrafter from a directory save_dflash wrote (weights upcast); `target` is the
    llama.LlamaForCausalLM whose embedding / head it uses where it ships none."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    stored = read_safetensors(os.path.join(directory, "model.safetensors"))
    draft_ids = None
    if "d2t" in stored:
        d2t = stored.pop("d2t")
        draft_ids = torch.arange(len(d2t)) + d2t
    drafter = DFlashDrafter(cfg, target.model.embed_tokens.weight, target.head_weight(), draft_ids,
                            own_embed="embed_tokens.weight" in stored)
    drafter.load_state_dict({k: v.float() for k, v in stored.items()})
    return drafter.eval()
