"""Train a Llama language model of the family (the target, or the draft's pre-training) on the corpus.

What it is for
  build_family.py calls train_lm() for the target and for the draft's first phase; evaluate()
  gives the validation loss (mean next-token cross-entropy in nats over every position of the
  validation windows; perplexity = exp(loss)). AdamW (betas 0.9/0.95, weight decay 0.1 on matrices
  only), linear warm-up then cosine decay to 10% of the peak, gradient clipping at 1.0, optional
  bf16 autocast (the weights and the optimizer stay float32). Every number that shapes a run comes
  from the arguments; batches come from data.train_batch(seed, step).

What it must not do
  Read the validation split for anything but evaluation; depend on wall-clock for what it trains
  (time is only logged); use randomness other than the seeded generator passed in.
"""

import math
import time

import torch
import torch.nn.functional as F

import data


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def make_optimizer(params, lr, weight_decay=0.1):
    params = [(n, p) for n, p in params if p.requires_grad]
    decay = [p for n, p in params if p.dim() >= 2]
    other = [p for n, p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def autocast(device, amp):
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=amp)


@torch.no_grad()
def evaluate(model, windows, batch, device):
    """Mean next-token loss (nats) over windows [n, T] (input = all but the last token)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch].to(device)
        logits = model(ids[:, :-1]).float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"))
        count += ids[:, 1:].numel()
    model.train()
    return total / count


def train_lm(model, stream, valid, *, steps, batch, seq_len, lr, warmup, seed, device, amp, eval_every,
             eval_windows, log, name):
    """Trains in place; appends dict records to `log`; returns the final validation loss."""
    model.to(device).train()
    opt = make_optimizer(model.named_parameters(), lr)
    start, tokens = time.time(), 0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        ids = data.train_batch(stream, step, batch, seq_len + 1, seed).to(device)
        with autocast(device, amp):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += ids[:, 1:].numel()
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rec = {"model": name, "step": step, "loss": round(float(loss), 4), "lr": opt.param_groups[0]["lr"],
                   "tokens": tokens, "elapsed_s": round(elapsed, 1), "tokens_per_s": round(tokens / elapsed)}
            log.append(rec)
            print(f"[{name}] step {step}/{steps} loss {float(loss):.4f} lr {rec['lr']:.2e} "
                  f"{rec['tokens_per_s']} tok/s {elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v = evaluate(model, valid[:eval_windows], batch, device)
            log.append({"model": name, "step": step, "valid_loss": round(v, 4), "valid_ppl": round(math.exp(v), 2)})
            print(f"[{name}] step {step} valid loss {v:.4f} ppl {math.exp(v):.2f}", flush=True)
    v = evaluate(model, valid, batch, device)
    log.append({"model": name, "step": steps, "valid_loss": round(v, 4), "valid_ppl": round(math.exp(v), 2),
                "final": True, "train_tokens": tokens, "elapsed_s": round(time.time() - start, 1)})
    print(f"[{name}] final valid loss {v:.4f} ppl {math.exp(v):.2f} ({tokens} tokens)", flush=True)
    return v
