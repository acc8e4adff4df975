"""Tune the family's target for chat: its own language-model batches mixed with chat conversations.

What it is for
  build_family.py's `chat` stage calls train_chat() on the target as trained (BF16, upcast), then
  ships the result as the target. Every step is one forward over `lm_rows` ordinary corpus windows
  (data.train_batch, as the target was trained, from another seed) and `chat_rows` rows of packed
  conversations (chat_data.chat_batch); loss = the LM windows' mean next-token loss + `chat_weight`
  x the conversations' mean loss over the answer tokens only (each function's source and the
  `\\n<|endoftext|>` that ends it; the system, user and role lines are context, not targets). The LM
  half is what keeps plain completion as good as before: a few hundred steps on conversations
  alone would pull the whole model toward them.
  The tied embedding / LM head is frozen: the MTP layer ships copies of it and EAGLE-3 reads it,
  so those must stay the target's exactly; everything else (layers, final norm) trains. AdamW as
  train_lm.py but without weight decay (a short tune should move weights only where the data
  pulls), linear warm-up then cosine to 10%, gradient clipping at 1.0, bf16 autocast.
  evaluate_chat() gives the answer-token loss on the validation pairs and how often the target's
  argmax at the end of an answer is `<|endoftext|>` (teacher-forced: does it know when to stop).

What it must not do
  Train the embedding; see the validation split (LM windows or pairs) except to evaluate; use
  randomness other than data.train_batch / chat_data.chat_batch's seeded draws; depend on
  wall-clock for what it trains.
"""

import math
import time

import torch
import torch.nn.functional as F

import chat_data
import data
from train_lm import autocast, evaluate, lr_at, make_optimizer


def masked_loss(logits, ids, mask):
    """Mean next-token loss of logits [B, T, V] against ids [B, T+1] at targets where mask[:, 1:]."""
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    m = mask[:, 1:].reshape(-1).float()
    return (loss * m).sum() / m.sum().clamp(min=1)


@torch.no_grad()
def evaluate_chat(model, pairs, batch, device):
    """(mean loss over answer tokens, fraction of answers whose final EOS is the argmax) over every
    pair of `pairs` as a one-turn conversation without a system line."""
    model.eval()
    total, count, stops = 0.0, 0, 0
    for start in range(0, len(pairs), batch):
        convs = [pairs.conversation([i]) for i in range(start, min(start + batch, len(pairs)))]
        width = max(len(c) for c, _ in convs)
        ids = torch.zeros(len(convs), width, dtype=torch.long)
        mask = torch.zeros(len(convs), width, dtype=torch.bool)
        for r, (c, m) in enumerate(convs):
            ids[r, :len(c)] = torch.tensor(c)
            mask[r, :len(m)] = torch.tensor(m)
        ids, mask = ids.to(device), mask.to(device)
        logits = model(ids[:, :-1]).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        m = mask[:, 1:].reshape(-1)
        total += float(loss[m].sum())
        count += int(m.sum())
        for r, (c, _) in enumerate(convs):
            stops += int(int(logits[r, len(c) - 2].argmax()) == c[-1])  # the position predicting the final EOS
    model.train()
    return total / count, stops / len(pairs)


def train_chat(model, stream, valid, chat_train, chat_valid, *, steps, lm_rows, chat_rows, chat_weight, seq_len, lr,
               warmup, seed, device, amp, eval_every, eval_windows, log, name="chat"):
    """Tunes `model` in place (embedding frozen); appends dict records to `log`."""
    model.to(device).train()
    model.model.embed_tokens.weight.requires_grad_(False)
    opt = make_optimizer(model.named_parameters(), lr, weight_decay=0.0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    start, lm_tokens, chat_tokens = time.time(), 0, 0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        lm = data.train_batch(stream, step, lm_rows, seq_len + 1, seed)
        chat_ids, chat_mask = chat_data.chat_batch(chat_train, step, chat_rows, seq_len + 1, seed + 1)
        ids = torch.cat([lm, torch.from_numpy(chat_ids)]).to(device)
        with autocast(device, amp):
            logits = model(ids[:, :-1])
        lm_loss = F.cross_entropy(logits[:lm_rows].float().reshape(-1, logits.shape[-1]), ids[:lm_rows, 1:].reshape(-1))
        mask = torch.from_numpy(chat_mask).to(device)
        chat_loss = masked_loss(logits[lm_rows:], ids[lm_rows:], mask)
        loss = lm_loss + chat_weight * chat_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        lm_tokens += lm_rows * seq_len
        chat_tokens += int(mask[:, 1:].sum())
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rec = {"model": name, "step": step, "lm_loss": round(float(lm_loss), 4),
                   "chat_loss": round(float(chat_loss), 4), "lr": opt.param_groups[0]["lr"],
                   "elapsed_s": round(elapsed, 1)}
            log.append(rec)
            print(f"[{name}] step {step}/{steps} lm {float(lm_loss):.4f} chat {float(chat_loss):.4f} "
                  f"lr {rec['lr']:.2e} {elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v = evaluate(model, valid[:eval_windows], lm_rows + chat_rows, device)
            c, s = evaluate_chat(model, chat_valid, lm_rows + chat_rows, device)
            log.append({"model": name, "step": step, "valid_loss": round(v, 4), "chat_valid_loss": round(c, 4),
                        "chat_valid_stop": round(s, 4)})
            print(f"[{name}] step {step} valid loss {v:.4f} ppl {math.exp(v):.2f}; chat answers {c:.4f}, "
                  f"stops {s:.2f}", flush=True)
    log.append({"model": name, "step": steps, "final": True, "lm_train_tokens": lm_tokens,
                "chat_train_answer_tokens": chat_tokens, "elapsed_s": round(time.time() - start, 1)})
    print(f"[{name}] done: {lm_tokens} LM tokens, {chat_tokens} answer tokens", flush=True)
