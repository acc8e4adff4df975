"""Rebuild the bundled model family from scratch: corpus -> tokenizer -> target -> chat -> draft -> heads -> medusa
-> dflash.

What it is for
  The one command of models/README.md (tools/train/build_family.sh wraps it with `nice` and
  Debian's python3):
      /usr/bin/python3 tools/train/build_family.py [--preset cpu|cuda|smoke] [--device cpu|cuda]
          [--out models/baton-tiny-code] [--work build/family] [--stages corpus,tokenizer,...]
  Stages (each reads the previous stages' files, so a later stage can be rerun alone):
    corpus     tools/train/corpus.py -> WORK/corpus (+ OUT/corpus_manifest.json)
    tokenizer  tokenizer_bpe.py -> WORK/tokenizer; data.py -> WORK/data/{train,valid}.npy
    target     train_lm.py -> OUT/target (BF16; also WORK/target_base); validation loss measured on
               the BF16 weights
    chat       chat_data.py + train_chat.py: the target tuned on its own corpus mixed with
               docstring -> function conversations (embedding frozen), from WORK/target_base
               -> OUT/target (BF16), its tokenizer_config.json with the chat template
    draft      train_lm.py (pre-training on the data) -> WORK/draft_pretrained (F32)
    heads      train_heads.py on the frozen BF16 target: draft distillation, EAGLE-3, MTP (with
               --features baton, EAGLE-3's features come from Baton's engine: baton_features.py)
               -> OUT/draft, OUT/eagle3, OUT/mtp (BF16)
    medusa     train_medusa.py on the frozen BF16 target: Medusa heads (Medusa-1) over EAGLE-3's
               draft vocabulary -> OUT/medusa (vLLM's MedusaModel layout, BF16); validation
               agreement measured on the heads as shipped
    dflash     train_dflash.py on the frozen BF16 target: a DFlash block drafter (two Qwen3 layers
               reading target layers [EAGLE-3's aux layers - 1, last], blocks of k + 1 = 5 tokens,
               its own lm_head over EAGLE-3's draft vocabulary, started from OUT/eagle3 where that
               fits) -> OUT/dflash (z-lab's DFlashDraftModel layout, BF16); validation agreement
               and acceptance length (k = 4) measured on the drafter as shipped
  Everything is seeded (PRESETS[..]["seed"]); batches depend only on (seed, step). The log of every
  stage (losses, validation, timings) goes to OUT/training_log.json.
  Presets: `cpu` is the shipped family (about two hours on 2 cores, the medusa stage 8 minutes of them,
  the dflash stage 28);
  `cuda` a larger family for a GPU (written to WORK/baton-small-code unless --out is given; not
  shipped: over the size budget); `smoke` the cpu shapes with a handful of steps (pipeline check in
  about two minutes).

What it must not do
  Touch anything outside --out and --work; train the heads, the Medusa heads or the DFlash drafter
  against weights other than the target exactly as shipped (they are reloaded from OUT/target,
  after the chat stage); tune an already chat-tuned target again (the chat stage starts from
  WORK/target_base, the target stage's output); depend on wall-clock for what is trained.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_data  # noqa: E402
import corpus  # noqa: E402
import data  # noqa: E402
import dflash  # noqa: E402
import heads  # noqa: E402
import llama  # noqa: E402
import medusa  # noqa: E402
import tokenizer_bpe  # noqa: E402
import train_chat  # noqa: E402
import train_dflash  # noqa: E402
import train_heads  # noqa: E402
import train_lm  # noqa: E402
import train_medusa  # noqa: E402
from baton_features import BatonFeatures  # noqa: E402
from llama import LlamaConfig, LlamaForCausalLM, load_hf_dir, save_hf_dir  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STAGES = ("corpus", "tokenizer", "target", "chat", "draft", "heads", "medusa", "dflash")

TINY_TARGET = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=64)
TINY_DRAFT = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=64)
PRESETS = {
    "cpu": dict(target=TINY_TARGET, draft=TINY_DRAFT, seq_len=512, batch=8, amp=True, seed=1234,
                target_steps=2200, target_lr=2e-3, draft_steps=1000, draft_lr=3e-3,
                heads_steps=800, heads_lr=2e-3, distill_lr=1e-3, ttt_steps=4, chain_fraction=0.25, warmup=50,
                draft_vocab_size=3072, aux_layers=(2, 4, 5), eval_every=100, eval_windows=24,
                chat_steps=300, chat_lr=2e-4, chat_warmup=20, chat_lm_rows=4, chat_rows=4, chat_weight=1.0,
                medusa_heads=4, medusa_layers=1, medusa_steps=400, medusa_lr=5e-3, medusa_warmup=20,
                medusa_micro_batch=2, medusa_valid_windows=0,
                dflash_layers=2, dflash_block=5, dflash_gamma=1.5, dflash_own_head=1, dflash_steps=3600,
                dflash_batch=4, dflash_anchors=128, dflash_micro_batch=2, dflash_lr=3e-3, dflash_warmup=20,
                dflash_eval_every=600, dflash_eval_windows=16, dflash_valid_windows=64, dflash_stride=4),
    "cuda": dict(target=dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=12, num_attention_heads=8,
                             num_key_value_heads=4, head_dim=64),
                 draft=dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=64),
                 seq_len=1024, batch=16, amp=True, seed=1234, target_steps=2000, target_lr=1e-3,
                 draft_steps=2000, draft_lr=2e-3, heads_steps=1500, heads_lr=1e-3, distill_lr=5e-4,
                 ttt_steps=4, chain_fraction=0.5, warmup=100, draft_vocab_size=3072, aux_layers=(2, 6, 9), eval_every=250,
                 eval_windows=64, chat_steps=400, chat_lr=2e-4, chat_warmup=40, chat_lm_rows=8, chat_rows=8,
                 chat_weight=1.0, medusa_heads=4, medusa_layers=1, medusa_steps=1000, medusa_lr=2e-3, medusa_warmup=50,
                 medusa_micro_batch=16, medusa_valid_windows=0,
                 dflash_layers=1, dflash_block=5, dflash_gamma=1.5, dflash_own_head=1, dflash_steps=4000,
                 dflash_batch=8, dflash_anchors=256, dflash_micro_batch=8, dflash_lr=2e-3, dflash_warmup=100,
                 dflash_eval_every=500, dflash_eval_windows=64, dflash_valid_windows=0, dflash_stride=2),
}
PRESETS["smoke"] = dict(PRESETS["cpu"], seq_len=128, batch=2, target_steps=6, draft_steps=6, heads_steps=4,
                        warmup=2, eval_every=3, eval_windows=2, chat_steps=4, chat_warmup=2, chat_lm_rows=1,
                        chat_rows=1, medusa_steps=4, medusa_warmup=2, medusa_valid_windows=4, dflash_steps=4,
                        dflash_warmup=2, dflash_anchors=16, dflash_eval_every=3, dflash_eval_windows=2,
                        dflash_valid_windows=4)


def stage_corpus(p, a, log):
    m = corpus.collect(os.path.join(a.work, "corpus"))
    os.makedirs(a.out, exist_ok=True)
    shutil.copy(os.path.join(a.work, "corpus", "manifest.json"), os.path.join(a.out, "corpus_manifest.json"))
    log.append({"stage": "corpus", "packages": m["packages"],
                "splits": {k: {x: v[x] for x in ("num_files", "bytes", "sha256")} for k, v in m["splits"].items()}})


def stage_tokenizer(p, a, log):
    with open(os.path.join(a.work, "corpus", "train.txt"), encoding="utf-8", newline="") as f:
        vocab, merges = tokenizer_bpe.train(f.read())
    tokenizer_bpe.write(os.path.join(a.work, "tokenizer"), vocab, merges, max_length=p["seq_len"])
    sizes = data.encode_corpus(os.path.join(a.work, "corpus"), os.path.join(a.work, "tokenizer"),
                               os.path.join(a.work, "data"))
    log.append({"stage": "tokenizer", "vocab_size": len(vocab), "merges": len(merges), "tokens": sizes})


def lm_config(shape, p):
    return LlamaConfig(vocab_size=tokenizer_bpe.VOCAB_SIZE, max_position_embeddings=2048, **shape)


def copy_tokenizer(a, directory):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.work, "tokenizer", name), os.path.join(directory, name))


def streams(a, p, windows_limit=None):
    d = os.path.join(a.work, "data")
    train = data.load_stream(d, "train")
    valid = data.valid_windows(data.load_stream(d, "valid"), p["seq_len"] + 1, windows_limit)
    return train, valid


def train_args(p, a, prefix, seed_offset):
    return dict(steps=p[prefix + "_steps"], batch=p["batch"], seq_len=p["seq_len"], lr=p[prefix + "_lr"],
                warmup=p["warmup"], seed=p["seed"] + seed_offset, device=a.device, amp=p["amp"],
                eval_every=p["eval_every"], eval_windows=p["eval_windows"])


def stage_target(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    model = LlamaForCausalLM(lm_config(p["target"], p))
    model.init_weights(torch.Generator().manual_seed(p["seed"]))
    train_lm.train_lm(model, train, valid, log=log, name="target", **train_args(p, a, "target", 0))
    out = os.path.join(a.out, "target")
    save_hf_dir(model.cpu(), out, torch.bfloat16)
    copy_tokenizer(a, out)
    shutil.copytree(out, os.path.join(a.work, "target_base"), dirs_exist_ok=True)  # what the chat stage tunes
    shipped = load_hf_dir(out, a.device)  # the BF16 weights as shipped, upcast
    v = train_lm.evaluate(shipped, valid, p["batch"], a.device)
    log.append({"model": "target", "shipped_bf16_valid_loss": round(v, 4), "parameters": model.config.num_parameters()})
    print(f"[target] shipped (BF16) valid loss {v:.4f}", flush=True)


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def chat_base(a):
    """WORK/target_base: the target as the target stage wrote it. A family shipped before the chat
    stage existed (or a fresh --work) gets it from OUT/target, unless that is chat-tuned already."""
    base, out = os.path.join(a.work, "target_base"), os.path.join(a.out, "target")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        with open(os.path.join(out, "tokenizer_config.json")) as f:
            if "chat_template" in json.load(f):
                raise SystemExit(f"{out} is chat-tuned already and {base} (the target before the chat stage) is "
                                 "missing: rerun the target stage, or put the untuned target there")
        shutil.copytree(out, base, dirs_exist_ok=True)
    return base


def stage_chat(p, a, log):
    base = chat_base(a)
    train, valid = streams(a, p, a.valid_limit)
    model = load_hf_dir(base, a.device)
    pairs = {s: chat_data.Pairs(a.work, s, p["seq_len"] + 1) for s in ("train", "valid")}
    lm_before = train_lm.evaluate(model, valid, p["batch"], a.device)
    chat_before, stop_before = train_chat.evaluate_chat(model, pairs["valid"], p["batch"], a.device)
    log.append({"stage": "chat", "base_sha256": file_sha256(os.path.join(base, "model.safetensors")),
                "pairs": {s: len(x) for s, x in pairs.items()}, "dropped": {s: x.dropped for s, x in pairs.items()},
                "valid_loss_before": round(lm_before, 4), "chat_valid_loss_before": round(chat_before, 4),
                "chat_valid_stop_before": round(stop_before, 4)})
    print(f"[chat] before: valid loss {lm_before:.4f}; chat answers {chat_before:.4f}, stops {stop_before:.2f}; "
          f"pairs {len(pairs['train'])} train, {len(pairs['valid'])} valid", flush=True)
    train_chat.train_chat(model, train, valid, pairs["train"], pairs["valid"], steps=p["chat_steps"],
                          lm_rows=p["chat_lm_rows"], chat_rows=p["chat_rows"], chat_weight=p["chat_weight"],
                          seq_len=p["seq_len"], lr=p["chat_lr"], warmup=p["chat_warmup"], seed=p["seed"] + 4,
                          device=a.device, amp=p["amp"], eval_every=p["eval_every"], eval_windows=p["eval_windows"],
                          log=log)
    out = os.path.join(a.out, "target")
    save_hf_dir(model.cpu(), out, torch.bfloat16)
    copy_tokenizer(a, out)
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        config = json.load(f)
    config["chat_template"] = chat_data.TEMPLATE
    llama.write_json(os.path.join(out, "tokenizer_config.json"), config)
    shipped = load_hf_dir(out, a.device)
    embed = shipped.model.embed_tokens.weight
    copies = [load_hf_dir(base, a.device).model.embed_tokens.weight]
    mtp = os.path.join(a.out, "mtp", "model.safetensors")
    if os.path.exists(mtp):  # the shipped MTP layer's copies of the embedding and head
        stored = read_safetensors(mtp)
        copies += [stored[k].float().to(a.device) for k in sorted(stored) if k.endswith(("embed_tokens.weight",
                                                                                          "shared_head.head.weight"))]
    if not all(torch.equal(embed, c) for c in copies):
        raise SystemExit("chat stage: the shipped embedding differs from the base's or the MTP layer's copies")
    v = train_lm.evaluate(shipped, valid, p["batch"], a.device)
    c, s = train_chat.evaluate_chat(shipped, pairs["valid"], p["batch"], a.device)
    log.append({"model": "target-chat", "shipped_bf16_valid_loss": round(v, 4), "chat_valid_loss": round(c, 4),
                "chat_valid_stop": round(s, 4), "valid_loss_change": round(v / lm_before - 1, 4)})
    print(f"[chat] shipped (BF16): valid loss {v:.4f} (before {lm_before:.4f}, {v / lm_before - 1:+.2%}); "
          f"chat answers {c:.4f} (before {chat_before:.4f}), stops {s:.2f} (before {stop_before:.2f})", flush=True)


def stage_draft(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    model = LlamaForCausalLM(lm_config(p["draft"], p))
    model.init_weights(torch.Generator().manual_seed(p["seed"] + 1))
    train_lm.train_lm(model, train, valid, log=log, name="draft-pretrain", **train_args(p, a, "draft", 1))
    save_hf_dir(model.cpu(), os.path.join(a.work, "draft_pretrained"), torch.float32)


def stage_heads(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    target = load_hf_dir(os.path.join(a.out, "target"), a.device)
    draft = load_hf_dir(os.path.join(a.work, "draft_pretrained"), a.device).train()
    draft_ids, coverage = train_heads.draft_vocabulary(train, target.config.vocab_size, p["draft_vocab_size"])
    eagle = heads.Eagle3Head(heads.eagle3_config(target.config, p["draft_vocab_size"], p["aux_layers"]), draft_ids)
    train_heads.seeded_init(eagle, p["seed"] + 2)
    with torch.no_grad():  # start from the target's output space: its head rows and final norm
        eagle.lm_head.weight.copy_(target.head_weight()[eagle.draft_ids])
        eagle.norm.weight.copy_(target.model.norm.weight)
    mtp = heads.MtpLayer(target.config, target.model.embed_tokens.weight, target.head_weight())
    train_heads.seeded_init(mtp, p["seed"] + 3)
    log.append({"stage": "heads", "draft_vocab_size": p["draft_vocab_size"], "draft_vocab_coverage": round(coverage, 4)})
    features = None
    if a.features == "baton":  # EAGLE-3's training features from Baton's engine (extract_hidden_states)
        features = BatonFeatures(a.baton, os.path.join(a.out, "target"), p["aux_layers"], threads=a.threads)
    log.append({"stage": "heads", "eagle3_features": a.features})
    train_heads.train_heads(target, draft, eagle, mtp, train, valid, steps=p["heads_steps"], batch=p["batch"],
                            seq_len=p["seq_len"], lr=p["heads_lr"], draft_lr=p["distill_lr"], warmup=p["warmup"],
                            seed=p["seed"] + 3, device=a.device, amp=p["amp"], ttt_steps=p["ttt_steps"],
                            chain_fraction=p["chain_fraction"],
                            eval_every=p["eval_every"], eval_windows=p["eval_windows"], log=log, features=features)
    out_draft = os.path.join(a.out, "draft")
    save_hf_dir(draft.cpu(), out_draft, torch.bfloat16)
    copy_tokenizer(a, out_draft)
    heads.save_eagle3(eagle.cpu(), os.path.join(a.out, "eagle3"))
    heads.save_mtp(mtp.cpu(), target.config, os.path.join(a.out, "mtp"))
    v = train_lm.evaluate(load_hf_dir(out_draft, a.device), valid, p["batch"], a.device)
    log.append({"model": "draft", "shipped_bf16_valid_loss": round(v, 4), "parameters": draft.config.num_parameters()})
    print(f"[draft] shipped (BF16) valid loss {v:.4f}", flush=True)


def stage_medusa(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    if p["medusa_valid_windows"]:
        valid = valid[:p["medusa_valid_windows"]]
    tdir = os.path.join(a.out, "target")
    target = load_hf_dir(tdir, a.device)  # the target exactly as shipped (after the chat stage), frozen
    draft_ids, coverage = train_heads.draft_vocabulary(train, target.config.vocab_size, p["draft_vocab_size"])
    c = target.config
    model = medusa.MedusaHeads(c.hidden_size, c.vocab_size, p["medusa_heads"], p["medusa_layers"], draft_ids)
    medusa.init_from_target(model, target)  # W = 0, lm heads = the target's rows: each head predicts p + 1
    micro = p["medusa_micro_batch"]
    init = train_medusa.evaluate_medusa(target, model, valid[:p["eval_windows"]], micro, a.device)
    log.append({"stage": "medusa", "target_sha256": file_sha256(os.path.join(tdir, "model.safetensors")),
                "draft_vocab_size": p["draft_vocab_size"], "draft_vocab_coverage": round(coverage, 4),
                "heads": p["medusa_heads"], "layers": p["medusa_layers"], "init_valid_loss": init[0],
                "init_valid_head_loss": init[1], "init_valid_agree": init[2]})
    print(f"[medusa] at init ({p['eval_windows']} windows): loss {init[0]} agree {init[2]}", flush=True)
    train_medusa.train_medusa(target, model, train, valid, steps=p["medusa_steps"], batch=p["batch"],
                              seq_len=p["seq_len"], lr=p["medusa_lr"], warmup=p["medusa_warmup"], seed=p["seed"] + 5,
                              device=a.device, amp=p["amp"], eval_every=p["eval_every"],
                              eval_windows=p["eval_windows"], log=log, micro_batch=micro)
    out = os.path.join(a.out, "medusa")
    medusa.save_medusa(model.cpu(), out)
    shipped = medusa.load_medusa(out).to(a.device)  # the BF16 weights as shipped, upcast
    v, vh, agree = train_medusa.evaluate_medusa(target, shipped, valid, micro, a.device)
    log.append({"model": "medusa", "step": p["medusa_steps"], "valid_loss": v, "valid_head_loss": vh,
                "valid_agree": agree, "valid_windows": len(valid), "final": True, "shipped_bf16": True,
                "parameters": sum(t.numel() for t in shipped.parameters())})
    print(f"[medusa] shipped (BF16), {len(valid)} validation windows: loss {v} heads {vh} agree {agree}", flush=True)


def mask_token(stream, vocab_size):
    """The lowest id (> 0, not BOS) the training stream never uses, else its rarest: the DFlash mask
    slots are embedded with the target's row of it."""
    freq = data.token_frequencies(stream, vocab_size)
    return min(range(1, vocab_size), key=lambda i: (int(freq[i]), i))


def stage_dflash(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    if p["dflash_valid_windows"]:
        valid = valid[:p["dflash_valid_windows"]]
    tdir = os.path.join(a.out, "target")
    target = load_hf_dir(tdir, a.device)  # the target exactly as shipped (after the chat stage), frozen
    c = target.config
    layer_ids = [i - 1 for i in p["aux_layers"]] + [c.num_hidden_layers - 1]  # EAGLE-3's features + the last
    mask = mask_token(train, c.vocab_size)
    draft_ids, coverage = None, 1.0
    if p["dflash_own_head"]:
        draft_ids, coverage = train_heads.draft_vocabulary(train, c.vocab_size, p["draft_vocab_size"])
    cfg = dflash.dflash_config(c, layers=p["dflash_layers"], target_layer_ids=layer_ids, block_size=p["dflash_block"],
                               mask_token_id=mask, draft_vocab_size=len(draft_ids) if draft_ids else None)
    model = dflash.DFlashDrafter(cfg, target.model.embed_tokens.weight, target.head_weight(), draft_ids)
    dflash.init_drafter(model, target, p["seed"] + 6, from_layer=c.num_hidden_layers - 1)
    edir = os.path.join(a.out, "eagle3")
    why = dflash.init_from_eagle3(model, edir) if os.path.exists(os.path.join(edir, "config.json")) else "no eagle3"
    init = "eagle3" if why is None else f"target layer {c.num_hidden_layers - 1} ({why})"
    model.to(a.device)
    micro, gamma, stride = p["dflash_micro_batch"], p["dflash_gamma"], p["dflash_stride"]
    v0 = train_dflash.evaluate_dflash(target, model, valid[:p["dflash_eval_windows"]], micro, a.device, gamma, 4,
                                      stride)
    log.append({"stage": "dflash", "target_sha256": file_sha256(os.path.join(tdir, "model.safetensors")),
                "target_layer_ids": layer_ids, "mask_token_id": mask, "block_size": p["dflash_block"],
                "layers": p["dflash_layers"], "draft_vocab_size": len(draft_ids) if draft_ids else c.vocab_size,
                "draft_vocab_coverage": round(coverage, 4), "init": init, "init_valid": v0})
    print(f"[dflash] init from {init}; mask token {mask}; layers {layer_ids}; at init ({p['dflash_eval_windows']} "
          f"windows): loss {v0['loss']} agree {v0['agree']} accept_len_k4 {v0['accept_len_k4']}", flush=True)
    train_dflash.train_dflash(target, model, train, valid, steps=p["dflash_steps"], batch=p["dflash_batch"],
                              seq_len=p["seq_len"], anchors=p["dflash_anchors"], lr=p["dflash_lr"],
                              warmup=p["dflash_warmup"], gamma=gamma, seed=p["seed"] + 6, device=a.device,
                              amp=p["amp"], eval_every=p["dflash_eval_every"], eval_windows=p["dflash_eval_windows"],
                              log=log, micro_batch=micro, k=4, stride=stride)
    out = os.path.join(a.out, "dflash")
    dflash.save_dflash(model, out)
    shipped = dflash.load_dflash(out, target).to(a.device)  # the BF16 weights as shipped, upcast
    fv, sv = train_dflash.evaluate_dflash(target, [model, shipped], valid, micro, a.device, gamma, 4, stride)
    log.append({"model": "dflash", "step": p["dflash_steps"], "valid_float32": fv, "valid": sv,
                "valid_windows": len(valid), "anchor_stride": stride, "final": True, "shipped_bf16": True,
                "parameters": sum(t.numel() for t in shipped.parameters())})
    print(f"[dflash] {len(valid)} validation windows, anchors every {stride}: float weights loss {fv['loss']} agree "
          f"{fv['agree']} accept_len_k4 {fv['accept_len_k4']}; shipped (BF16) loss {sv['loss']} agree {sv['agree']} "
          f"accept_len_k4 {sv['accept_len_k4']}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None, help="default: cpu, or cuda with --device cuda")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="family directory (default models/baton-tiny-code for cpu)")
    ap.add_argument("--work", default=os.path.join(REPO, "build", "family"))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--features", choices=["pytorch", "baton"], default="pytorch",
                    help="where EAGLE-3's training features (the target's aux-layer states) come from: this PyTorch "
                         "forward, or Baton's engine via extract_hidden_states (needs --baton)")
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "release", "cli", "baton"),
                    help="the baton binary for --features baton")
    ap.add_argument("--valid-limit", type=int, default=None, help="cap validation windows (smoke runs)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a preset number for experiments, e.g. --set heads_steps=100")
    a = ap.parse_args(argv)
    a.preset = a.preset or ("cuda" if a.device.startswith("cuda") else "cpu")
    a.out = a.out or (os.path.join(REPO, "models", "baton-tiny-code") if a.preset != "cuda"
                      else os.path.join(a.work, "baton-small-code"))
    p = dict(PRESETS[a.preset])
    for item in a.set:
        key, _, value = item.partition("=")
        if key not in p or isinstance(p[key], (dict, tuple)):
            raise SystemExit(f"--set {item}: not a numeric preset key ({sorted(p)})")
        p[key] = type(p[key])(value)
    torch.set_num_threads(a.threads)
    stages = a.stages.split(",")
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise SystemExit(f"unknown stages {sorted(unknown)}; known: {STAGES}")
    os.makedirs(a.out, exist_ok=True)
    log_path = os.path.join(a.out, "training_log.json")
    log = []
    if os.path.exists(log_path) and stages != list(STAGES):
        with open(log_path) as f:
            log = json.load(f)["log"]  # keep earlier stages' records when rerunning some
    total = time.time()
    for stage in STAGES:
        if stage not in stages:
            continue
        t, cpu = time.time(), time.process_time()
        print(f"=== stage {stage} ({a.preset}, {a.device})", flush=True)
        globals()["stage_" + stage](p, a, log)
        # cpu_s (all threads) / threads estimates the wall time on an otherwise idle machine.
        log.append({"stage": stage, "wall_s": round(time.time() - t, 1), "cpu_s": round(time.process_time() - cpu, 1),
                    "preset": a.preset, "device": a.device, "threads": a.threads})
        with open(log_path, "w") as f:
            json.dump({"preset": a.preset, "config": p, "log": log}, f, indent=1)
            f.write("\n")
    print(f"=== done in {(time.time() - total) / 60:.1f} min -> {a.out}", flush=True)


if __name__ == "__main__":
    main()
