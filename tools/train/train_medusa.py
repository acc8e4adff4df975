"""Train Medusa heads (medusa.py) against the frozen target: Medusa-1, the target untouched.

What it is for
  build_family.py's `medusa` stage calls train_medusa() on the target exactly as shipped: every
  batch runs the frozen target once (its logits and its final-norm output h) and all heads read h.
  Loss, as train_heads.py trains EAGLE-3 (soft cross-entropy = KL to the target up to a constant):
  head i at position p against the target's next-token distribution at p + 1 + i (which predicts
  the token at p + 2 + i), renormalised over the draft vocabulary, at positions whose target argmax
  is in the draft vocabulary (a head cannot propose other tokens); head i weighted 0.8^i; summed
  over heads. Labels are the target's, never the data's: a proposer is only useful when it agrees
  with the target. evaluate_medusa() reports the same loss on validation windows (float32, no
  autocast) and, per head, top-1 agreement with the target's greedy token at p + 2 + i over every
  position that has one (drafts outside the draft vocabulary count as misses): what greedy
  acceptance of head i's draft depends on, teacher-forced on fixed text.

What it must not do
  Update the target (it is frozen and in eval mode); draw batches from anything but
  data.train_batch with its own seed; use the validation split for training; depend on
  wall-clock for what is trained (time is only logged).
"""

import time

import torch

import data
from train_heads import SEED_OFFSET, STEP_WEIGHT, soft_ce
from train_lm import autocast, lr_at, make_optimizer


def target_pass(target, ids, device, amp):
    """The frozen target on ids [B, T]: (logits [B, T, V], final-norm output [B, T, H]), float32."""
    with torch.no_grad(), autocast(device, amp):
        logits, states = target(ids, states=True)
    return logits.float(), states[-1].float()


def medusa_losses(target, medusa, ids, device, amp):
    """One batch ids [B, T] -> (weighted loss, per-head losses, per-head [hits, positions],
    drafts [heads, B, T] target ids, the target's argmax [B, T]). Head i's drafts at p >= T-1-i have
    no label in the window and are not counted."""
    t_logits, final = target_pass(target, ids, device, amp)
    t_arg = t_logits.argmax(-1)  # the target's greedy token at p + 1
    d_probs = torch.softmax(t_logits[..., medusa.token_map], dim=-1)
    in_draft = medusa.in_draft[t_arg]
    with autocast(device, amp):
        outs = medusa(final)
    t = ids.shape[1]
    total, losses, counts, drafts = 0.0, [], [], []
    for i, logits in enumerate(outs):
        n = t - 1 - i  # positions p = 0..T-2-i have a label at p + 1 + i <= T - 1
        label = slice(1 + i, t)
        loss = soft_ce(logits[:, :n], d_probs[:, label], in_draft[:, label])
        total = total + STEP_WEIGHT ** i * loss
        losses.append(loss)
        draft = medusa.token_map[logits.argmax(-1)]
        counts.append([int((draft[:, :n] == t_arg[:, label]).sum()), draft[:, :n].numel()])
        drafts.append(draft)
    return total, losses, counts, torch.stack(drafts), t_arg


@torch.no_grad()
def evaluate_medusa(target, medusa, windows, batch, device):
    """Validation (float32, no autocast): mean weighted loss over batches, per-head mean loss and
    per-head top-1 agreement with the target (hits / positions over all windows)."""
    medusa.eval()
    total, per_head, hits, n_batches = 0.0, [0.0] * medusa.num_heads, [[0, 0] for _ in range(medusa.num_heads)], 0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch, :-1].to(device)
        loss, losses, counts, _, _ = medusa_losses(target, medusa, ids, device, amp=False)
        total += float(loss)
        per_head = [a + float(b) for a, b in zip(per_head, losses)]
        hits = [[a[0] + b[0], a[1] + b[1]] for a, b in zip(hits, counts)]
        n_batches += 1
    medusa.train()
    return (round(total / n_batches, 4), [round(x / n_batches, 4) for x in per_head],
            [round(h / n, 4) for h, n in hits])


def train_medusa(target, medusa, stream, valid, *, steps, batch, seq_len, lr, warmup, seed, device, amp,
                 eval_every, eval_windows, log, micro_batch=None):
    """Trains medusa in place; appends records to log. The final validation is the caller's (on the
    heads as saved: build_family.stage_medusa). micro_batch: rows per forward/backward (gradients
    accumulate over the batch; the loss is the mean of the micro-batches' losses). On the CPU, tensors
    above glibc's mmap threshold (at most 32 MB by default; a batch of 8 x 512 tokens' logits is 67 MB)
    are mapped and page-faulted anew at every allocation: a step of 8 rows in one piece took 4x as
    long as in pieces of 2 on the 2-core machine."""
    target.to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    medusa.to(device).train()
    opt = make_optimizer(medusa.named_parameters(), lr)
    micro = micro_batch or batch
    start = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        ids = data.train_batch(stream, step, batch, seq_len, seed + SEED_OFFSET).to(device)
        opt.zero_grad(set_to_none=True)
        loss, losses, counts = 0.0, [0.0] * medusa.num_heads, [[0, 0] for _ in range(medusa.num_heads)]
        for first in range(0, batch, micro):
            part = ids[first:first + micro]
            scale = part.shape[0] / batch
            l, ls, cs, _, _ = medusa_losses(target, medusa, part, device, amp)
            (l * scale).backward()
            loss += float(l) * scale
            losses = [a + float(b) * scale for a, b in zip(losses, ls)]
            counts = [[a[0] + b[0], a[1] + b[1]] for a, b in zip(counts, cs)]
        torch.nn.utils.clip_grad_norm_(medusa.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rec = {"model": "medusa", "step": step, "elapsed_s": round(elapsed, 1), "loss": round(loss, 4),
                   "head_loss": [round(x, 4) for x in losses],
                   "agree": [round(h / max(n, 1), 3) for h, n in counts]}
            log.append(rec)
            print(f"[medusa] step {step}/{steps} loss {rec['loss']} heads {rec['head_loss']} agree {rec['agree']} "
                  f"{elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v, vh, a = evaluate_medusa(target, medusa, valid[:eval_windows], micro, device)
            log.append({"model": "medusa", "step": step, "valid_loss": v, "valid_head_loss": vh, "valid_agree": a})
            print(f"[medusa] step {step} valid loss {v} heads {vh} agree {a}", flush=True)
    log.append({"model": "medusa", "step": steps, "trained": True, "train_tokens": steps * batch * seq_len,
                "elapsed_s": round(time.time() - start, 1)})
