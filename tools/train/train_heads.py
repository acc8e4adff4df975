"""Train the draft model (distillation), the EAGLE-3 head and the MTP layer against the frozen target.

What it is for
  build_family.py calls train_heads() after the target is trained: every batch runs the frozen
  target once (logits, every layer's input, final-norm output) and feeds all three learners, so the
  target's forward is paid once. Losses (all "soft cross-entropy" = KL to the target up to a
  constant, i.e. distillation of the target's next-token distribution):
    draft   the draft LM's distribution vs the target's, every position;
    EAGLE-3 each of `ttt_steps` unrolled drafting steps (heads.unroll), weight 0.8^j, vs the
            target's distribution renormalised over the draft vocabulary, at positions whose
            target argmax is in the draft vocabulary (a head cannot propose other tokens);
    MTP     the same unrolled steps over the full vocabulary.
  Labels are the target's, never the data's: a proposer is only useful when it agrees with the
  target. Steps >= 1 of the unrolled drafting run on a random `chain_fraction` of the chain
  starts (step 0 always runs every position, since later steps read its keys): the later steps
  cost that fraction of step 0, so more batches fit in the same time. evaluate_heads() reports the same losses on validation windows plus top-1 agreement with
  the target's argmax per drafting step (what greedy acceptance depends on).

What it must not do
  Update the target (it is frozen and in eval mode); draw batches from anything but
  data.train_batch with its own seed offset; use the validation split for training.
"""

import time

import torch
import torch.nn.functional as F

import data
import heads
from train_lm import autocast, lr_at, make_optimizer

STEP_WEIGHT = 0.8
SEED_OFFSET = 7919  # heads see different windows than the target did, from the same stream


def draft_vocabulary(stream, vocab_size, draft_vocab_size):
    """The draft_vocab_size most frequent training tokens (ties: lower id), sorted by id."""
    freq = data.token_frequencies(stream, vocab_size)
    order = sorted(range(vocab_size), key=lambda i: (-int(freq[i]), i))[:draft_vocab_size]
    return sorted(order), float(freq[order].sum() / freq.sum())


def soft_ce(logits, probs, mask=None):
    """Mean over positions of -sum(probs * log_softmax(logits)); mask [..] bool selects positions."""
    loss = -(probs * F.log_softmax(logits.float(), dim=-1)).sum(-1)
    if mask is None:
        return loss.mean()
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def target_pass(target, ids, aux_layers, device, amp, features=None):
    """(logits, aux [B, T-1, layers * hidden], final [B, T-1, hidden]); with `features` (a
    baton_features.BatonFeatures) aux comes from Baton's engine instead of this forward."""
    with torch.no_grad(), autocast(device, amp):
        logits, states = target(ids, states=True)
    logits = logits.float()
    if features is not None:
        aux = features.aux(ids.cpu()).to(ids.device)
    else:
        aux = torch.cat([states[i].float() for i in aux_layers], dim=-1)[:, :-1]
    return logits, aux, states[-1].float()[:, :-1]


def head_losses(target, draft, eagle, mtp, ids, ttt_steps, device, amp, chains=None, features=None):
    """Returns (losses dict, agreement dict) for one batch ids [B, T]. chains: the chain starts
    trained at drafting steps >= 1 (None = all); step 0 always covers every position. features:
    where EAGLE-3's aux states come from (None: this PyTorch forward)."""
    c = target.config
    embed = target.model.embed_tokens.weight.detach()
    t_logits, aux, final = target_pass(target, ids, eagle.config["eagle_aux_hidden_state_layer_ids"], device, amp,
                                       features)
    t_probs = torch.softmax(t_logits, dim=-1)
    t_arg = t_logits.argmax(-1)
    d_probs = torch.softmax(t_logits[..., eagle.draft_ids], dim=-1)
    in_draft = eagle.t2d[t_arg]
    losses, agree = {}, {}
    if draft is not None:
        with autocast(device, amp):
            dl = draft(ids)
        losses["draft"] = soft_ce(dl, t_probs)
        agree["draft"] = [float((dl.argmax(-1) == t_arg).float().mean())]
    with autocast(device, amp):
        e_steps, sel = heads.unroll(eagle, embed, ids, eagle.first_hidden(aux), ttt_steps, c.head_dim, c.rope_theta,
                                    zero_pos0_embedding=False, chains=chains)
        m_steps, _ = heads.unroll(mtp, embed, ids, final, ttt_steps, c.head_dim, c.rope_theta,
                                  zero_pos0_embedding=True, chains=chains)
    t = ids.shape[1]
    losses["eagle3"], losses["mtp"], agree["eagle3"], agree["mtp"] = 0.0, 0.0, [], []
    for j in range(ttt_steps):
        rows = torch.arange(t - 1, device=ids.device) if j == 0 else sel
        label_pos = (rows + j + 1).clamp(max=t - 1)  # target position whose distribution is the label
        valid = (rows + j + 1 <= t - 1)[None, :].expand(ids.shape[0], -1)
        w = STEP_WEIGHT ** j
        el, ml = e_steps[j], m_steps[j]
        losses["eagle3"] = losses["eagle3"] + w * soft_ce(el, d_probs[:, label_pos], valid & in_draft[:, label_pos])
        losses["mtp"] = losses["mtp"] + w * soft_ce(ml, t_probs[:, label_pos], valid)
        label = t_arg[:, label_pos]
        n = valid.sum().clamp(min=1)
        agree["eagle3"].append(float(((eagle.draft_ids[el.argmax(-1)] == label) & valid).sum() / n))
        agree["mtp"].append(float(((ml.argmax(-1) == label) & valid).sum() / n))
    return losses, agree


def chain_subset(t, fraction, seed, step, device):
    """A sorted random subset (fraction of the T-1 chains) for steps >= 1; None = all chains."""
    if fraction >= 1.0:
        return None
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    count = max(1, int(round((t - 1) * fraction)))
    return torch.randperm(t - 1, generator=g)[:count].sort().values.to(device)


@torch.no_grad()
def evaluate_heads(target, draft, eagle, mtp, windows, batch, ttt_steps, device):
    """Validation: mean losses and per-step top-1 agreement with the target (float32, no autocast)."""
    mods = [m for m in (draft, eagle, mtp) if m is not None]
    for m in mods:
        m.eval()
    sums, agrees, n = {}, {}, 0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch, :-1].to(device)
        losses, agree = head_losses(target, draft, eagle, mtp, ids, ttt_steps, device, amp=False)
        for k, v in losses.items():
            sums[k] = sums.get(k, 0.0) + float(v)
        for k, v in agree.items():
            agrees[k] = [a + b for a, b in zip(agrees.get(k, [0.0] * len(v)), v)]
        n += 1
    for m in mods:
        m.train()
    return ({k: round(v / n, 4) for k, v in sums.items()},
            {k: [round(a / n, 4) for a in v] for k, v in agrees.items()})


def train_heads(target, draft, eagle, mtp, stream, valid, *, steps, batch, seq_len, lr, draft_lr, warmup,
                seed, device, amp, ttt_steps, chain_fraction, eval_every, eval_windows, log, features=None):
    target.to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    learners = {"eagle3": (eagle, lr), "mtp": (mtp, lr)}
    if draft is not None:
        learners["draft"] = (draft, draft_lr)
    opts = {}
    for name, (m, peak) in learners.items():
        m.to(device).train()
        opts[name] = (make_optimizer(m.named_parameters(), peak), peak)
    start = time.time()
    for step in range(steps):
        ids = data.train_batch(stream, step, batch, seq_len, seed + SEED_OFFSET).to(device)
        chains = chain_subset(ids.shape[1], chain_fraction, seed, step, device)
        losses, agree = head_losses(target, draft, eagle, mtp, ids, ttt_steps, device, amp, chains, features)
        for opt, _ in opts.values():
            opt.zero_grad(set_to_none=True)
        sum(losses.values()).backward()
        for name, (opt, peak) in opts.items():
            for g in opt.param_groups:
                g["lr"] = lr_at(step, steps, peak, warmup)
            torch.nn.utils.clip_grad_norm_(learners[name][0].parameters(), 1.0)
            opt.step()
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rec = {"model": "heads", "step": step, "elapsed_s": round(elapsed, 1),
                   "loss": {k: round(float(v), 4) for k, v in losses.items()},
                   "agree": {k: [round(a, 3) for a in v] for k, v in agree.items()}}
            log.append(rec)
            print(f"[heads] step {step}/{steps} {rec['loss']} agree {rec['agree']} {elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v, a = evaluate_heads(target, draft, eagle, mtp, valid[:eval_windows], batch, ttt_steps, device)
            log.append({"model": "heads", "step": step, "valid_loss": v, "valid_agree": a})
            print(f"[heads] step {step} valid {v} agree {a}", flush=True)
    v, a = evaluate_heads(target, draft, eagle, mtp, valid, batch, ttt_steps, device)
    log.append({"model": "heads", "step": steps, "valid_loss": v, "valid_agree": a, "final": True,
                "elapsed_s": round(time.time() - start, 1)})
    print(f"[heads] final valid {v} agree {a}", flush=True)
    return v, a


def seeded_init(module, seed):
    """Normal(0, 0.02) for matrices, ones for norm weights, in sorted-name order (reproducible)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if p.dim() < 2:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)

