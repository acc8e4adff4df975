"""Trainable Qwen3-Next multi-token-prediction (MTP) module, its training, and its `mtp.*` I/O.

What it is for
  The MTP layer of models/baton-tiny-hybrid (tools/train/build_hybrid.py trains it): the module a
  Qwen3-Next checkpoint ships as `mtp.*` tensors beside the target's, which Baton's engine drafts
  with when given `{"method": "mtp", "num_speculative_tokens": k}` and no `model`
  (engine/spec/draft_head.cc, kMtpQwen3Next). Names below are the checkpoint's, after `mtp.`.

  One drafting step at head position p consumes the feature f (the target's final-norm output at
  p for the first step, the previous step's returned feature after it) and the token t at p + 1:
      x      = fc(cat(pre_fc_norm_embedding(embed(t)), pre_fc_norm_hidden(f)))       [2H] -> [H]
      r      = x + o_proj(attention(...) * sigmoid(gate))       layers.0, gated full attention
      out    = r + mlp(post_attention_layernorm(r))             MoE iff the target's rule says
                                                                 layer index 0 is sparse
      normed = norm(out);  logits = the target's lm_head(normed); the next step's f = normed
  layers.0 is a Qwen3-Next full-attention layer (qwen3_next.GatedAttention: q_proj gives per head
  [query | gate], zero-centred q/k norms before RoPE on the first head_dim * partial_rotary_factor
  dims, grouped KV heads) over input_layernorm(x), at position p. Every RMSNorm here is
  zero-centred (x * rsqrt(mean x^2 + eps) * (1 + w)); the embedding and lm_head are the target's
  (frozen tensors passed in, never stored under `mtp.`); there is no position-0 zeroing. This is
  the math of tools/reference/draft_heads_ref.py's "mtp-qwen3next" layout with a
  Qwen3NextForCausalLM config; test_qwen3_next_mtp.py checks the two agree in float64.

  Training (train_mtp, like train_heads.py does for the family's DeepSeek-style MTP layer): the
  target is frozen; every batch runs it once and the layer is unrolled over `steps` drafting steps
  the way it drafts ("training-time test": step j of the chain started at p runs at position p + j
  with token ids[p + j + 1], reads the previous step's own `normed` output, and attends to the
  first step's K/V at positions <= p plus its own chain's later-step K/V, what the KV cache holds
  while drafting); loss = sum over steps of 0.8^j * the soft-label cross-entropy against the
  TARGET's next-token distribution at p + j + 1 (never the data's), plus a small load-balancing
  term for the MoE router. Steps >= 1 run on a random fraction of the chain starts
  (train_heads.chain_subset). evaluate_mtp gives the same loss on validation windows and the top-1
  agreement with the target's greedy token per drafting step.

  amp_ready(model) makes a qwen3_next model (target or MTP layer) trainable under CPU bf16
  autocast: qwen3_next.py is float32 code, and under torch 1.13's autocast its chunked delta rule
  fails (torch.eye in bf16), its MoE scatter mixes dtypes, and a bf16 depthwise-conv backward is
  slow. It swaps the classes of the GatedDeltaNet / SparseMoE modules for subclasses whose forward
  is the same math with those parts in float32 (the convolution as K shifted multiply-adds), the
  parameters untouched, and whose MoE also records the router's load-balancing term
  (moe_aux_loss). In float32/float64 without autocast they compute what the originals compute
  (checked by test_qwen3_next_mtp.py).

  I/O: mtp_tensors(mtp, dtype) -> {"mtp.<name>": tensor}, stored in the target's model.safetensors
  by qwen3_next.save_hf_dir(..., extra_tensors=...); load_mtp(config, tensors) builds the module
  back from them (qwen3_next.load_hf_dir(..., mtp=True) splits them off).

What it must not do
  Hold or update target weights (embedding and lm_head come in as frozen tensors); support more
  than one MTP layer (num_nextn_predict_layers 1); train against the data's tokens instead of the
  target's distribution; change the names or shapes of the `mtp.*` layout the engine loads; let
  amp_ready change what a model computes (only where it is computed in float32).
"""

import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import data  # noqa: E402
import qwen3_next  # noqa: E402
from heads import chain_attention  # noqa: E402
from llama import MLP  # noqa: E402
from qwen3_next import GatedAttention, GatedDeltaNet, RMSNorm, SparseMoE, apply_partial_rope, rope_cos_sin  # noqa: E402
from train_heads import STEP_WEIGHT, chain_subset, soft_ce  # noqa: E402
from train_lm import autocast, lr_at, make_optimizer  # noqa: E402

SEED_OFFSET = 7919  # the MTP layer sees other windows than the target did, from the same stream
AUX_COEF = 0.01  # weight of the MoE load-balancing term (Switch Transformer's)


# ----------------------------------------------------------------------------- the module


class MtpDecoderLayer(nn.Module):
    """mtp.layers.{i}: a Qwen3-Next gated full-attention layer; its MLP by the config's sparse rule."""

    def __init__(self, c, i):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = GatedAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = SparseMoE(c) if c.is_sparse(i) else MLP(c.hidden_size, c.intermediate_size)


class Qwen3NextMtp(nn.Module):
    """The `mtp.*` module for a target with Qwen3NextConfig `config` (its own geometry and rules)."""

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        h = c.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(h, c.rms_norm_eps)
        self.pre_fc_norm_hidden = RMSNorm(h, c.rms_norm_eps)
        self.layers = nn.ModuleList([MtpDecoderLayer(c, 0)])
        self.norm = RMSNorm(h, c.rms_norm_eps)

    def step(self, emb, feat, cos, sin, head_weight, first_kv=None, chain_kv=(), chain_pos=None):
        """One drafting step of chains. emb/feat [B, S, H]; cos/sin [S, rotary] at each row's position.
        first_kv None: the first step of every chain (S = P, causal over its own rows); else the
        first step's (k, v) [B, P, KV, hd], the chain's earlier later-step (k, v) in chain_kv and
        chain_pos [S] each row's chain start. Returns (normed [B, S, H], logits [B, S, V], (k, v))."""
        layer = self.layers[0]
        a = layer.self_attn
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(feat)], dim=-1))
        y = layer.input_layernorm(x)
        b, s, _ = y.shape
        hd = a.head_dim
        q, gate = a.q_proj(y).view(b, s, a.heads, 2 * hd).split(hd, dim=-1)
        k = a.k_proj(y).view(b, s, a.kv_heads, hd)
        v = a.v_proj(y).view(b, s, a.kv_heads, hd)
        q = apply_partial_rope(a.q_norm(q), cos, sin)
        k = apply_partial_rope(a.k_norm(k), cos, sin)
        if first_kv is None:
            first_kv, ks, vs = (k, v), [], []
        else:
            ks, vs = [kv[0] for kv in chain_kv] + [k], [kv[1] for kv in chain_kv] + [v]
        attn = chain_attention(q, first_kv[0], first_kv[1], ks, vs, chain_pos)
        r = x + a.o_proj(attn * torch.sigmoid(gate.reshape(b, s, a.heads * hd)))
        out = r + layer.mlp(layer.post_attention_layernorm(r))
        normed = self.norm(out)
        return normed, normed @ head_weight.T, (k, v)


def unroll(mtp, embed_weight, head_weight, ids, feats, steps, chains=None):
    """`steps` drafting steps for the chains p = 0..T-2 of ids [B, T], teacher-forced with ids.

    feats [B, T-1, H]: the target's final-norm output at p (the first step's feature). Step 0 runs
    every chain (its K/V are what all later steps read); steps >= 1 run the chains in `chains`
    (sorted LongTensor; None = all). Step j of chain p reads token ids[p + j + 1] (0 past the end)
    at position p + j. Returns (logits per step, [B, S_j, V]; the chain index tensor of steps >= 1);
    step j's logits of chain p predict the token at p + j + 2."""
    c = mtp.config
    b, t = ids.shape
    p = t - 1
    padded = torch.cat([ids, ids.new_zeros(b, steps)], dim=1)
    cos, sin = rope_cos_sin(t + steps, c.rotary_dim, c.rope_theta, feats.dtype, ids.device)
    emb = F.embedding(padded[:, 1:1 + p], embed_weight)
    h, logits, first_kv = mtp.step(emb, feats, cos[:p], sin[:p], head_weight)
    out = [logits]
    sel = torch.arange(p, device=ids.device) if chains is None else chains.to(ids.device)
    h, chain_kv = h[:, sel], []
    for j in range(1, steps):
        emb = F.embedding(padded[:, sel + j + 1], embed_weight)
        h, logits, kv = mtp.step(emb, h, cos[sel + j], sin[sel + j], head_weight, first_kv, chain_kv, sel)
        chain_kv.append(kv)
        out.append(logits)
    return out, sel


@torch.no_grad()
def greedy_drafts(mtp, target, tokens, k):
    """k greedy drafts after tokens t_0..t_{n-1} (n >= 2) as the engine drafts them: the layer
    catches up on p = 0..n-2 with the target's features, then each step feeds its own feature and
    draft back. Returns (drafts, the k logit rows they were taken from [V] each)."""
    tokens = [int(t) for t in tokens]
    n = len(tokens)
    embed, head = target.model.embed_tokens.weight, target.head_weight()
    drafts, rows = [], []
    for j in range(k):
        ids = torch.tensor([tokens + drafts], device=embed.device)
        _, states = target(ids, states=True)
        chain = torch.tensor([n - 2], device=embed.device)
        steps, _ = unroll(mtp, embed, head, ids, states[-1][:, :-1], j + 1, chains=chain)
        row = steps[0][0, n - 2] if j == 0 else steps[j][0, 0]
        rows.append(row)
        drafts.append(int(row.argmax()))
    return drafts, rows


# ----------------------------------------------------------------------------- I/O


def mtp_tensors(mtp, dtype=torch.bfloat16):
    """{"mtp.<name>": tensor} in `dtype`, sorted: what the target's model.safetensors stores."""
    return {"mtp." + k: v.detach().to("cpu", dtype).contiguous() for k, v in sorted(mtp.state_dict().items())}


def load_mtp(config, tensors):
    """A float32 Qwen3NextMtp from the `mtp.*` tensors (as split off by load_hf_dir(mtp=True));
    every tensor must be the module's and every parameter present."""
    mtp = Qwen3NextMtp(config)
    wanted = {"mtp." + k for k in mtp.state_dict()}
    missing, extra = sorted(wanted - set(tensors)), sorted(set(tensors) - wanted)
    if missing or extra:
        raise ValueError(f"mtp tensors: missing {missing[:5]}, unexpected {extra[:5]}")
    mtp.load_state_dict({k[len("mtp."):]: v.float() for k, v in tensors.items()})
    return mtp.eval()


@torch.no_grad()
def init_mtp(mtp, seed, std=0.02):
    """Training start: Normal(0, std) matrices (o_proj / down_proj scaled by 1/sqrt(2)), zero-centred
    norms 0 (scale 1), in sorted-name order from a seeded generator (reproducible)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(mtp.named_parameters()):
        if p.dim() < 2:
            p.zero_()
        else:
            s = std / math.sqrt(2) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            p.copy_(torch.randn(p.shape, generator=g) * s)
    return mtp


# ----------------------------------------------------------------------------- bf16 autocast


def _wide(t):
    """bf16/f16 -> float32; float32/float64 stay as they are."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


class AmpGatedDeltaNet(GatedDeltaNet):
    """qwen3_next.GatedDeltaNet with everything between the projections in float32 (or wider)."""

    def forward(self, x):
        bsz, t, _ = x.shape
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        r = nv // nk
        qkvz = self.in_proj_qkvz(x).view(bsz, t, nk, 2 * dk + 2 * r * dv)
        ba = self.in_proj_ba(x).view(bsz, t, nk, 2 * r)
        with torch.autocast(device_type=x.device.type, enabled=False):
            q, k, v, z = _wide(qkvz).split([dk, dk, r * dv, r * dv], dim=-1)
            b, a = _wide(ba).split([r, r], dim=-1)
            b, a, z = b.reshape(bsz, t, nv), a.reshape(bsz, t, nv), z.reshape(bsz, t, nv, dv)
            mixed = torch.cat([q.reshape(bsz, t, -1), k.reshape(bsz, t, -1), v.reshape(bsz, t, -1)], dim=-1)
            # depthwise causal conv, tap K-1 on the current token: sum_j w[:, j] * x[t - (K-1) + j]
            w = self.conv1d.weight[:, 0, :].to(mixed.dtype)  # [C, K]
            padded = F.pad(mixed, (0, 0, self.kernel - 1, 0))
            conv = padded[:, 0:t] * w[:, 0]
            for j in range(1, self.kernel):
                conv = conv + padded[:, j:j + t] * w[:, j]
            q, k, v = F.silu(conv).split([nk * dk, nk * dk, nv * dv], dim=-1)
            q = qwen3_next.l2_normalize(q.reshape(bsz, t, nk, dk)) * (1.0 / math.sqrt(dk))
            k = qwen3_next.l2_normalize(k.reshape(bsz, t, nk, dk))
            q = q.repeat_interleave(r, dim=2).transpose(1, 2)
            k = k.repeat_interleave(r, dim=2).transpose(1, 2)
            v = v.reshape(bsz, t, nv, dv).transpose(1, 2)
            beta = torch.sigmoid(b).transpose(1, 2)
            g = (-self.A_log.exp() * F.softplus(a + self.dt_bias)).transpose(1, 2)
            if self.chunk:
                o = qwen3_next.delta_rule_chunked(q, k, v, g, beta, self.chunk)
            else:
                o = qwen3_next.delta_rule_recurrent(q, k, v, g, beta)
            y = self.norm(o.transpose(1, 2)) * F.silu(z)
        return self.out_proj(y.reshape(bsz, t, nv * dv))


class AmpSparseMoE(SparseMoE):
    """qwen3_next.SparseMoE with routing and the weighted sum in float32 (or wider); records the
    router's load-balancing term E * sum_e f_e P_e (f: share of routed slots, P: mean probability)
    of each forward in training mode in self.aux (moe_aux_loss collects them)."""

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        wide = torch.promote_types(x.dtype, torch.float32)
        probs = torch.softmax(self.gate(x).to(wide), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros(x.shape, dtype=wide, device=x.device)
        counts = torch.bincount(chosen.reshape(-1), minlength=len(self.experts))
        self.last_counts = counts
        for e in counts.nonzero().flatten().tolist():
            tok, slot = (chosen == e).nonzero(as_tuple=True)
            out = out.index_add(0, tok, self.experts[e](x[tok]).to(wide) * weights[tok, slot, None])
        out = out + torch.sigmoid(self.shared_expert_gate(x).to(wide)) * self.shared_expert(x).to(wide)
        if self.training:
            share = counts.to(wide) / chosen.numel()
            self.aux = getattr(self, "aux", []) + [len(self.experts) * (share * probs.mean(0)).sum()]
        return out.reshape(shape)


def amp_ready(model):
    """Swap qwen3_next's GatedDeltaNet / SparseMoE modules of `model` (in place) for the Amp
    subclasses above; parameters and state dict are untouched. Returns the model."""
    for m in model.modules():
        if type(m) is GatedDeltaNet:
            m.__class__ = AmpGatedDeltaNet
        elif type(m) is SparseMoE:
            m.__class__ = AmpSparseMoE
    return model


def moe_aux_loss(model):
    """Mean of the load-balancing terms recorded since the last call (0 without MoE); clears them."""
    terms = []
    for m in model.modules():
        if isinstance(m, AmpSparseMoE):
            terms += getattr(m, "aux", [])
            m.aux = []
    return torch.stack(terms).mean() if terms else 0.0


def expert_shares(model):
    """Per MoE module, the share of routed slots each expert got in its latest forward."""
    return {name: [round(float(c) / max(1, int(m.last_counts.sum())), 3) for c in m.last_counts]
            for name, m in model.named_modules() if isinstance(m, SparseMoE) and m.last_counts is not None}


# ----------------------------------------------------------------------------- training


def mtp_losses(target, mtp, ids, steps, device, amp, chains=None):
    """(weighted soft-CE sum over steps, top-1 agreement per step) for one batch ids [B, T]."""
    with torch.no_grad(), autocast(device, amp):
        t_logits, states = target(ids, states=True)
    t_logits = t_logits.float()
    t_probs, t_arg = torch.softmax(t_logits, dim=-1), t_logits.argmax(-1)
    final = states[-1].float()[:, :-1]
    embed, head = target.model.embed_tokens.weight.detach(), target.head_weight().detach()
    with autocast(device, amp):
        logits, sel = unroll(mtp, embed, head, ids, final, steps, chains)
    t = ids.shape[1]
    loss, agree = 0.0, []
    for j in range(steps):
        rows = torch.arange(t - 1, device=ids.device) if j == 0 else sel
        label_pos = (rows + j + 1).clamp(max=t - 1)  # the target position whose distribution is the label
        valid = (rows + j + 1 <= t - 1)[None, :].expand(ids.shape[0], -1)
        loss = loss + STEP_WEIGHT ** j * soft_ce(logits[j], t_probs[:, label_pos], valid)
        n = valid.sum().clamp(min=1)
        agree.append(float(((logits[j].argmax(-1) == t_arg[:, label_pos]) & valid).sum() / n))
    return loss, agree


@torch.no_grad()
def evaluate_mtp(target, mtp, windows, batch, steps, device):
    """Validation (float32, no autocast): mean loss and top-1 agreement per drafting step, every
    chain at every step."""
    mtp.eval()
    total, agrees, n = 0.0, [0.0] * steps, 0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch, :-1].to(device)
        loss, agree = mtp_losses(target, mtp, ids, steps, device, amp=False)
        total += float(loss)
        agrees = [a + b for a, b in zip(agrees, agree)]
        n += 1
    mtp.train()
    moe_aux_loss(mtp)
    return round(total / n, 4), [round(a / n, 4) for a in agrees]


def train_mtp(target, mtp, stream, valid, *, steps, batch, seq_len, lr, warmup, seed, device, amp, ttt_steps,
              chain_fraction, eval_every, eval_windows, log, name="mtp"):
    """Trains `mtp` in place against the frozen `target`; appends records to `log`; returns the
    final (validation loss, agreement per step) on all of `valid`."""
    target.to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    mtp.to(device).train()
    opt = make_optimizer(mtp.named_parameters(), lr)
    start = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        ids = data.train_batch(stream, step, batch, seq_len, seed + SEED_OFFSET).to(device)
        chains = chain_subset(ids.shape[1], chain_fraction, seed, step, device)
        loss, agree = mtp_losses(target, mtp, ids, ttt_steps, device, amp, chains)
        aux = moe_aux_loss(mtp)
        opt.zero_grad(set_to_none=True)
        (loss + AUX_COEF * aux).backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rec = {"model": name, "step": step, "loss": round(float(loss), 4), "aux": round(float(aux), 4),
                   "lr": opt.param_groups[0]["lr"], "agree": [round(a, 3) for a in agree],
                   "elapsed_s": round(elapsed, 1)}
            log.append(rec)
            print(f"[{name}] step {step}/{steps} loss {rec['loss']:.4f} aux {rec['aux']:.3f} agree {rec['agree']} "
                  f"{elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v, a = evaluate_mtp(target, mtp, valid[:eval_windows], batch, ttt_steps, device)
            log.append({"model": name, "step": step, "valid_loss": v, "valid_agree": a})
            print(f"[{name}] step {step} valid loss {v} agree {a}", flush=True)
    v, a = evaluate_mtp(target, mtp, valid, batch, ttt_steps, device)
    log.append({"model": name, "step": steps, "valid_loss": v, "valid_agree": a, "final": True,
                "elapsed_s": round(time.time() - start, 1)})
    print(f"[{name}] final valid loss {v} agree {a}", flush=True)
    return v, a
