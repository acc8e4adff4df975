"""Train a DFlash block drafter (dflash.py) against the frozen target: the target untouched.

What it is for
  build_family.py's `dflash` stage calls train_dflash() on the target exactly as shipped, the way
  SpecForge / the DFlash paper train it, adapted to the family: every batch runs the frozen target
  once without its LM head (the states of dflash_config.target_layer_ids and the final-norm output,
  whose logits are computed at the label rows only); the drafter computes the
  context keys/values of every window position once, then the blocks of `anchors` random anchor
  positions per window in ONE forward (dflash.DFlashDrafter.block_logits: block a sees the context
  before a and its own keys, exactly what inference computes). Loss, as train_heads.py trains
  EAGLE-3 (soft cross-entropy = KL to the target up to a constant): block row j = 1..B-1 at anchor
  a against the target's next-token distribution at position a + j - 1 (which predicts the token
  at a + j), renormalised over the draft vocabulary when the drafter has its own head, at rows
  whose target argmax it can propose; row j weighted exp(-(j - 1) / gamma) (the paper's decay:
  early rows gate the acceptance of later ones); the weighted sum over rows and anchors divided by
  the sum of the weights. Labels are the target's, never the data's.
  evaluate_dflash() reports on validation windows (float32, no autocast), teacher-forced, at fixed
  anchors (every `stride`-th position): the same loss, per block row the top-1 agreement with the
  target's greedy token, and the expected acceptance length at k drafts, 1 + the mean over anchors
  of the length of the agreeing prefix of drafts 1..k, computed on blocks of k + 1 tokens (what
  the engine runs with num_speculative_tokens = k). A drafter that ships its own embed_tokens
  trains only its mask row (optimizer()).

What it must not do
  Update the target (it is frozen and in eval mode); draw batches from anything but
  data.train_batch with its own seed offset (anchors from a generator seeded by seed and step);
  use the validation split for training; depend on wall-clock for what is trained (time is only
  logged).
"""

import time

import torch
import torch.nn.functional as F

import data
from train_lm import autocast, lr_at, make_optimizer

SEED_OFFSET = 15485863  # the drafter sees other windows than the target and the other heads did


def target_states(target, ids, device, amp):
    """The frozen target on ids [B, T], without its LM head: llama's hidden_states, float32."""
    with torch.no_grad(), autocast(device, amp):
        states = target.hidden_states(ids)
    return [s.float() for s in states]


def target_pass(target, drafter, ids, device, amp):
    """(the target's final-norm output [B, T, H], the drafter's features [B, T, len(ids) H]), float32.
    The labels' logits are computed from the final-norm output at the label rows only."""
    states = target_states(target, ids, device, amp)
    return states[-1], drafter.features(states)


def sample_anchors(batch, t, block, count, seed, step, device):
    """[batch, count] sorted distinct anchors per window in 1 .. t - block + 1 (every block row has a
    label inside the window), from a generator seeded by (seed, step)."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) % (2 ** 63))
    n = t - block + 1
    count = min(count, n)
    rows = [torch.randperm(n, generator=g)[:count].sort().values + 1 for _ in range(batch)]
    return torch.stack(rows).to(device)


def fixed_anchors(batch, t, k, stride, device):
    """Every stride-th anchor 1, 1 + stride, ... <= t - k (blocks of k + 1 tokens fully labelled)."""
    return torch.arange(1, t - k + 1, stride, device=device)[None].expand(batch, -1).contiguous()


def row_weights(rows, gamma, device):
    return torch.exp(-torch.arange(rows, dtype=torch.float32, device=device) / gamma)


def block_losses(drafter, target, final, ids, anchors, ctx, gamma, length=None):
    """(loss, per-row loss [L-1], hits [b, A, L-1] bool) of the blocks of length L (block_size) at
    anchors [b, A]; final [b, T, H]: the target's final-norm output (its logits at a + j - 1 label
    block row j). Autocast, if any, is the caller's."""
    out = drafter.block_hidden(ids, anchors, ctx, length)[:, :, 1:]  # rows 1..L-1
    logits = drafter.head(out).float()
    b, L1 = ids.shape[0], logits.shape[2]
    label_pos = anchors[..., None] + torch.arange(L1, device=ids.device)  # a + j - 1 for row j
    with torch.no_grad():
        rows = torch.gather(final, 1, label_pos.reshape(b, -1, 1).expand(-1, -1, final.shape[-1]))
        tl = (rows @ target.head_weight().T).float().view(*label_pos.shape, -1)
        t_arg = tl.argmax(-1)
        probs = torch.softmax(tl[..., drafter.draft_ids] if drafter.own_head else tl, dim=-1)
        ok = drafter.in_draft[t_arg].float()
    ce = -(probs * F.log_softmax(logits, dim=-1)).sum(-1)  # [b, A, L-1]
    w = row_weights(L1, gamma, ids.device) * ok
    loss = (ce * w).sum() / w.sum().clamp(min=1e-6)
    per_row = (ce.detach() * ok).sum((0, 1)) / ok.sum((0, 1)).clamp(min=1)
    hits = drafter.drafts(logits.detach()) == t_arg
    return loss, per_row, hits


def dflash_losses(target, drafter, ids, anchors, device, amp, gamma):
    final, feats = target_pass(target, drafter, ids, device, amp)
    with autocast(device, amp):
        ctx = drafter.context(feats)
        return block_losses(drafter, target, final, ids, anchors, ctx, gamma)


def acceptance(hits, k):
    """hits [..., >= k] bool (drafts 1..k agree) -> per-anchor accepted count (agreeing prefix length)."""
    return torch.cumprod(hits[..., :k].long(), dim=-1).sum(-1)


@torch.no_grad()
def evaluate_dflash(target, drafters, windows, batch, device, gamma, k=4, stride=4):
    """Validation (float32, no autocast) at the anchors 1, 1 + stride, ...: per drafter a dict with
    the loss, per-row loss and top-1 agreement (block_size rows), and the acceptance length at k
    drafts (blocks of k + 1 tokens) with the agreement of those k drafts. drafters: one drafter
    (-> one dict) or a list (-> a list of dicts; one target pass per batch serves them all)."""
    single = not isinstance(drafters, (list, tuple))
    drafters = [drafters] if single else list(drafters)
    sums = [dict(total=0.0, rows=0.0, hits=0, khits=0, accepted=0, anchors=0, blocks=0) for _ in drafters]
    n_batches = 0
    for d in drafters:
        d.eval()
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch, :-1].to(device)
        states = target_states(target, ids, device, amp=False)
        for d, s in zip(drafters, sums):
            L = d.block_size
            ctx = d.context(d.features(states))
            anchors = fixed_anchors(ids.shape[0], ids.shape[1], L - 1, stride, device)
            loss, per_row, hits = block_losses(d, target, states[-1], ids, anchors, ctx, gamma)
            if k + 1 != L:
                anchors = fixed_anchors(ids.shape[0], ids.shape[1], k, stride, device)
                _, _, khits = block_losses(d, target, states[-1], ids, anchors, ctx, gamma, length=k + 1)
            else:
                khits = hits
            s["total"] += float(loss)
            s["rows"] = s["rows"] + per_row
            s["hits"] = s["hits"] + hits.sum((0, 1))
            s["khits"] = s["khits"] + khits.sum((0, 1))
            s["accepted"] += int(acceptance(khits, k).sum())
            s["anchors"] += khits.shape[0] * khits.shape[1]
            s["blocks"] += hits.shape[0] * hits.shape[1]
        n_batches += 1
    for d in drafters:
        d.train()
    out = [{"loss": round(s["total"] / n_batches, 4), "row_loss": [round(float(x) / n_batches, 4) for x in s["rows"]],
            "agree": [round(int(x) / s["blocks"], 4) for x in s["hits"]],
            f"agree_k{k}": [round(int(x) / s["anchors"], 4) for x in s["khits"]],
            f"accept_len_k{k}": round(1 + s["accepted"] / s["anchors"], 4), "anchors": s["anchors"]} for s in sums]
    return out[0] if single else out


def optimizer(drafter, lr):
    """train_lm's AdamW; an own embed_tokens trains its mask row only (the other rows stay the
    target's: their gradients are zeroed and they get no weight decay)."""
    named = [(n, p) for n, p in drafter.named_parameters() if n != "embed_tokens.weight"]
    opt = make_optimizer(named, lr)
    if hasattr(drafter, "embed_tokens"):
        w = drafter.embed_tokens.weight
        keep = torch.zeros(w.shape[0], 1, device=w.device)
        keep[drafter.mask_token_id] = 1.0
        w.register_hook(lambda grad: grad * keep)
        opt.add_param_group({"params": [w], "weight_decay": 0.0})
    return opt


def train_dflash(target, drafter, stream, valid, *, steps, batch, seq_len, anchors, lr, warmup, gamma, seed, device,
                 amp, eval_every, eval_windows, log, micro_batch=None, k=4, stride=4):
    """Trains drafter in place; appends records to log. The final validation is the caller's (on the
    drafter as saved: build_family.stage_dflash). micro_batch: windows per forward/backward
    (gradients accumulate; the loss is the mean of the micro-batches' losses), as train_medusa."""
    target.to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    drafter.to(device).train()
    opt = optimizer(drafter, lr)
    micro = micro_batch or batch
    L = drafter.block_size
    start = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        ids = data.train_batch(stream, step, batch, seq_len, seed + SEED_OFFSET).to(device)
        anch = sample_anchors(batch, seq_len, L, anchors, seed, step, device)
        opt.zero_grad(set_to_none=True)
        loss, rows, hits, accepted = 0.0, 0.0, 0, 0
        for first in range(0, batch, micro):
            scale = min(micro, batch - first) / batch
            l, r, h = dflash_losses(target, drafter, ids[first:first + micro], anch[first:first + micro], device,
                                    amp, gamma)
            (l * scale).backward()
            loss += float(l) * scale
            rows = rows + r.detach() * scale
            hits = hits + h.sum((0, 1))
            accepted += int(acceptance(h, min(k, L - 1)).sum())
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            agree = [round(int(x) / (batch * anch.shape[1]), 3) for x in hits]
            acc = round(1 + accepted / (batch * anch.shape[1]), 3)  # blocks of block_size, first min(k, L-1) rows
            rec = {"model": "dflash", "step": step, "elapsed_s": round(elapsed, 1), "loss": round(loss, 4),
                   "row_loss": [round(float(x), 4) for x in rows], "agree": agree, "accept_len": acc}
            log.append(rec)
            print(f"[dflash] step {step}/{steps} loss {rec['loss']} agree {agree} accept_len {acc} "
                  f"{elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v = evaluate_dflash(target, drafter, valid[:eval_windows], micro, device, gamma, k, stride)
            log.append({"model": "dflash", "step": step, "valid": v})
            print(f"[dflash] step {step} valid loss {v['loss']} agree {v['agree']} "
                  f"accept_len_k{k} {v[f'accept_len_k{k}']}", flush=True)
    log.append({"model": "dflash", "step": steps, "trained": True, "train_tokens": steps * batch * seq_len,
                "train_blocks": steps * batch * anchors, "elapsed_s": round(time.time() - start, 1)})
