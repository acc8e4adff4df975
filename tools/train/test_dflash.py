"""Checks the DFlash drafter's training code (dflash.py, train_dflash.py) and, optionally, the shipped drafter.

What it is for
      /usr/bin/python3 tools/train/test_dflash.py                      # unit checks, seconds
      /usr/bin/python3 tools/train/test_dflash.py --family models/baton-tiny-code [--data build/family/data]
  On a tiny random Llama target (seeded, BF16 as saved) and random small drafters (2 layers, GQA,
  random norm weights; once with the target's embedding and head, once with its own embed_tokens
  and an lm_head over a draft vocabulary with d2t):
    - math: the block logits of the training forward (dflash.DFlashDrafter.block_logits: many
      anchors of a window, and of two windows, in ONE masked forward, context computed once per
      window) equal tools/reference/dflash_ref.py's (float64; the reference the engine's DFlash
      drafter is tested against) run separately for each anchor on the prefix that ends at it,
      for full blocks (block_size tokens) and shorter ones (k + 1 < block_size), and the drafts
      agree except at near-ties;
    - layout: save_dflash writes exactly the published DFlash config keys and tensor names
      (BF16 weights, I64 d2t, nothing else) and load_dflash reads them back; init_from_eagle3
      copies a saved EAGLE-3 head's tensors where the layouts agree and refuses one that does not;
    - training: a short train_dflash run lowers the validation loss and raises the acceptance
      length, leaves the target's weights untouched and is bit-for-bit reproducible.
  With --family: the shipped
  drafter's drafts at 16 anchors of one validation window (the first of DATA's valid.npy, else
  seeded random tokens) recomputed by dflash_ref.py from the saved files must equal the training
  code's, except at near-ties; prints both codes' agreement with the target's greedy tokens.
  Exits 1 on any failure.

What it must not do
  Write anything outside a temporary directory; loosen a tolerance to make a failure pass.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import data  # noqa: E402
import dflash  # noqa: E402
import dflash_ref  # noqa: E402
import draft_heads_ref as dh  # noqa: E402
import heads  # noqa: E402
import train_dflash  # noqa: E402
import transformer_ref as ref  # noqa: E402
from llama import LlamaConfig, LlamaForCausalLM, load_hf_dir, save_hf_dir  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402

TOL = 2e-3  # max |float32 - float64| on logits
TIE = 1e-3  # a draft whose float64 top-1 - top-2 margin is below this may differ in float32


def check(failures, ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def tiny_target(tmp):
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model = LlamaForCausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(5))
    with torch.no_grad():  # a peaked next-token distribution (Normal(0, 0.02) gives a nearly uniform one)
        model.model.embed_tokens.weight.mul_(50.0)
    d = os.path.join(tmp, "target")
    save_hf_dir(model, d, torch.bfloat16)
    return load_hf_dir(d), d


def random_drafter(target, seed, own, block_size=5, layers=2, ids=(0, 2)):
    c = target.config
    draft_ids = sorted(torch.randperm(c.vocab_size, generator=torch.Generator().manual_seed(seed))[:64].tolist()) \
        if own else None
    cfg = dflash.dflash_config(c, layers=layers, target_layer_ids=ids, block_size=block_size, mask_token_id=7,
                               draft_vocab_size=len(draft_ids) if own else None, intermediate_size=48)
    d = dflash.DFlashDrafter(cfg, target.model.embed_tokens.weight, target.head_weight(), draft_ids, own_embed=own)
    dflash.init_drafter(d, target, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # larger random weights everywhere, norms too, so every term matters
        for name, p in sorted(d.named_parameters()):
            if p.dim() < 2:
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
            elif name != "embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.add_(torch.randn(p.shape, generator=g))
    return d


def math_checks(failures, tmp, target, tdir, own):
    what = "own embed_tokens + lm_head over a draft vocabulary (d2t)" if own else "the target's embedding and head"
    d = random_drafter(target, 11 if own else 3, own)
    ddir = os.path.join(tmp, "dflash-own" if own else "dflash")
    dflash.save_dflash(d, ddir)
    loaded = dflash.load_dflash(ddir, target)  # the BF16 weights as saved: both codes read these
    rt = ref.load_model(tdir)
    rh = dh.load_head(ddir, rt)
    g = torch.Generator().manual_seed(4)
    seqs = torch.randint(1, target.config.vocab_size, (2, 40), generator=g)
    seqs[:, 0] = 0
    anchors = torch.tensor([[1, 5, 6, 17, 30, 35], [2, 3, 12, 20, 29, 33]])
    with torch.no_grad():
        _, states = target(seqs, states=True)
        ctx = loaded.context(loaded.features(states))
        for length in (5, 3):  # block_size, and k = 2 < block_size - 1
            logits = loaded.block_logits(seqs, anchors, ctx, length).double()
            err, bad, ties = 0.0, 0, 0
            for w in range(2):
                for j, a in enumerate(anchors[w].tolist()):
                    r = dflash_ref.run_dflash(rh, rt, seqs[w, :a + 1].tolist(), length - 1)
                    err = max(err, float((logits[w, j] - r["block_logits"]).abs().max()))
                    mine = loaded.drafts(logits[w, j, 1:]).tolist()
                    for x, y, m in zip(mine, r["drafts"], r["margins"]):
                        bad += int(x != y and m >= TIE)
                        ties += int(m < TIE)
            check(failures, err < TOL and bad == 0,
                  f"{what}: 12 anchors of 2 windows in one forward, blocks of {length}: logits vs dflash_ref.py "
                  f"max |diff| {err:.1e}, drafts differ at {bad} ({ties} near-ties)")
        # One anchor per forward gives the same logits as many: no block sees another's keys.
        one = torch.stack([loaded.block_logits(seqs[:1], anchors[:1, j:j + 1], [(k[:1], v[:1]) for k, v in ctx])[0, 0]
                           for j in range(anchors.shape[1])])
        err = float((one - loaded.block_logits(seqs, anchors, ctx)[0]).abs().max())
        check(failures, err < 1e-5, f"{what}: blocks computed alone equal those computed together ({err:.1e})")
    return d, ddir


def layout_checks(failures, target, d, ddir, own):
    cfg = json.load(open(os.path.join(ddir, "config.json")))
    want_keys = {"architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "rms_norm_eps", "rope_theta",
                 "max_position_embeddings", "vocab_size", "hidden_act", "attention_bias", "tie_word_embeddings",
                 "num_target_layers", "dflash_config", "bos_token_id", "eos_token_id", "torch_dtype"}
    if own:
        want_keys.add("draft_vocab_size")
    check(failures, set(cfg) == want_keys and cfg["architectures"] == ["DFlashDraftModel"]
          and cfg["model_type"] == "qwen3" and cfg["tie_word_embeddings"] is False
          and cfg["num_target_layers"] == 3 and cfg["vocab_size"] == 96 and cfg["hidden_act"] == "silu"
          and cfg["attention_bias"] is False
          and cfg["dflash_config"] == {"mask_token_id": 7, "target_layer_ids": [0, 2], "block_size": 5},
          f"config.json keys {sorted(cfg)}")
    check(failures, sorted(os.listdir(ddir)) == ["config.json", "model.safetensors"], "only the two files")
    stored = read_safetensors(os.path.join(ddir, "model.safetensors"))
    h, q, kv, i = 32, 64, 32, 48
    want = {"fc.weight": [h, 2 * h], "hidden_norm.weight": [h], "norm.weight": [h]}
    for n in range(2):
        p = f"layers.{n}."
        want.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                     p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                     p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
                     p + "self_attn.q_norm.weight": [16], p + "self_attn.k_norm.weight": [16],
                     p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
                     p + "mlp.down_proj.weight": [h, i]})
    want = {k: (v, torch.bfloat16) for k, v in want.items()}
    if own:
        want.update({"lm_head.weight": ([64, h], torch.bfloat16), "embed_tokens.weight": ([96, h], torch.bfloat16),
                     "d2t": ([64], torch.int64)})
    got = {k: (list(v.shape), v.dtype) for k, v in stored.items()}
    check(failures, got == want, f"tensors: {len(got)} with the expected names, shapes and dtypes"
          + ("" if got == want else f" -- got {got}"))
    if own:
        check(failures, (torch.arange(64) + stored["d2t"]).tolist() == d.draft_ids.tolist(),
              "d2t maps draft index d to target id d + d2t[d] (the draft vocabulary)")
    loaded = dflash.load_dflash(ddir, target)
    check(failures, all(torch.equal(v.float(), loaded.state_dict()[k]) for k, v in stored.items() if k != "d2t")
          and torch.equal(loaded.draft_ids, d.draft_ids), "load_dflash reads the stored weights back")


def eagle_init_checks(failures, tmp, target):
    """init_from_eagle3 copies a saved EAGLE-3 head's tensors where the layouts agree, refuses otherwise."""
    c = target.config
    draft_ids = list(range(0, 96, 2))
    eagle = heads.Eagle3Head(heads.eagle3_config(c, len(draft_ids), (1, 2, 3), intermediate_size=48), draft_ids)
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for _, p in sorted(eagle.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g))
    edir = os.path.join(tmp, "eagle3")
    heads.save_eagle3(eagle, edir)
    stored = {k: v.float() for k, v in read_safetensors(os.path.join(edir, "model.safetensors")).items()}

    def drafter(ids, own=True, vocab=draft_ids):
        cfg = dflash.dflash_config(c, layers=2, target_layer_ids=ids, block_size=5, mask_token_id=7,
                                   draft_vocab_size=len(vocab) if own else None, intermediate_size=48)
        d = dflash.DFlashDrafter(cfg, target.model.embed_tokens.weight, target.head_weight(), vocab if own else None)
        dflash.init_drafter(d, target, 1)
        return d

    d = drafter([0, 1, 2])
    why = dflash.init_from_eagle3(d, edir)
    m, h, a = "midlayer.", 32, d.layers[1].self_attn
    ok = why is None and torch.equal(d.fc.weight, stored["fc.weight"]) and torch.equal(d.lm_head.weight,
                                                                                       stored["lm_head.weight"])
    ok = ok and torch.equal(a.k_proj.weight, stored[m + "self_attn.k_proj.weight"][:, h:])
    ok = ok and torch.equal(a.q_proj.weight, stored[m + "self_attn.q_proj.weight"][:, :h]
                            + stored[m + "self_attn.q_proj.weight"][:, h:])
    ok = ok and torch.equal(d.layers[0].mlp.down_proj.weight, stored[m + "mlp.down_proj.weight"])
    check(failures, ok, f"init_from_eagle3 copies a fitting EAGLE-3 head's tensors ({why})")
    refusals = [dflash.init_from_eagle3(drafter([0, 2]), edir),
                dflash.init_from_eagle3(drafter([0, 1, 2], False), edir),
                dflash.init_from_eagle3(drafter([0, 1, 2], vocab=list(range(48))), edir)]
    check(failures, all(r is not None for r in refusals), f"... and refuses heads that do not fit: {refusals}")


def training_checks(failures, target):
    c = target.config
    # The stream cycles through 11 tokens, so the token at p determines the next ones.
    stream = np.tile(np.random.RandomState(2).randint(1, c.vocab_size, 11), 400).astype(np.int64)
    windows = data.valid_windows(stream, 33, 8)
    before = {k: v.clone() for k, v in target.state_dict().items()}

    def make():
        cfg = dflash.dflash_config(c, layers=1, target_layer_ids=[0, 2], block_size=5, mask_token_id=7)
        d = dflash.DFlashDrafter(cfg, target.model.embed_tokens.weight, target.head_weight())
        dflash.init_drafter(d, target, 9)
        return d

    d0 = make()
    v0 = train_dflash.evaluate_dflash(target, d0, windows, 4, "cpu", gamma=4.0, k=4, stride=2)
    runs = []
    for _ in range(2):
        d = make()
        train_dflash.train_dflash(target, d, stream, windows, steps=30, batch=4, seq_len=32, anchors=8, lr=1e-2,
                                  warmup=3, gamma=4.0, seed=7, device="cpu", amp=False, eval_every=15,
                                  eval_windows=4, log=[], micro_batch=2, k=4, stride=2)
        runs.append(d)
    v1 = train_dflash.evaluate_dflash(target, runs[0], windows, 4, "cpu", gamma=4.0, k=4, stride=2)
    check(failures, v1["loss"] < v0["loss"] - 0.1 and v1["accept_len_k4"] > v0["accept_len_k4"],
          f"training lowers the validation loss ({v0['loss']} -> {v1['loss']}) and raises the acceptance length "
          f"({v0['accept_len_k4']} -> {v1['accept_len_k4']})")
    check(failures, all(torch.equal(before[k], v) for k, v in target.state_dict().items()),
          "the target's weights are unchanged")
    same = all(torch.equal(a, b) for a, b in zip(runs[0].state_dict().values(), runs[1].state_dict().values()))
    check(failures, same, "two training runs give identical drafters")


def unit_checks(failures):
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        target, tdir = tiny_target(tmp)
        for own in (False, True):
            d, ddir = math_checks(failures, tmp, target, tdir, own)
            layout_checks(failures, target, d, ddir, own)
        eagle_init_checks(failures, tmp, target)
        training_checks(failures, target)


def family_check(failures, family, data_dir, length, anchors=16):
    tdir, ddir = os.path.join(family, "target"), os.path.join(family, "dflash")
    target = load_hf_dir(tdir)
    d = dflash.load_dflash(ddir, target)
    path = os.path.join(data_dir, "valid.npy") if data_dir else None
    if path and os.path.exists(path):
        window = data.valid_windows(data.load_stream(data_dir, "valid"), length + 1, 1)[0, :-1]
        source = f"validation window 0 of {path}"
    else:
        g = torch.Generator().manual_seed(3)
        window = torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(1, target.config.vocab_size,
                                                                             (length - 1,), generator=g)])
        source = "seeded random tokens"
    k = min(4, d.block_size - 1)
    ids = window[None]
    picks = torch.linspace(1, length - 1 - k, anchors).round().long()[None]
    with torch.no_grad():
        final, feats = train_dflash.target_pass(target, d, ids, "cpu", amp=False)
        t_arg = (final @ target.head_weight().T)[0].argmax(-1)
        logits = d.block_logits(ids, picks, d.context(feats), k + 1)[0, :, 1:]
    mine = d.drafts(logits)
    rt = ref.load_model(tdir)
    rh = dh.load_head(ddir, rt)
    bad, ties, hits_ref, hits_mine = 0, 0, 0, 0
    r_arg = ref.forward(rt, window.tolist()).argmax(-1)
    for j, a in enumerate(picks[0].tolist()):
        r = dflash_ref.run_dflash(rh, rt, window[:a + 1].tolist(), k)
        for i, (x, y, m) in enumerate(zip(mine[j].tolist(), r["drafts"], r["margins"])):
            bad += int(x != y and m >= TIE)
            ties += int(m < TIE)
            hits_ref += int(y == int(r_arg[a + i]))
            hits_mine += int(x == int(t_arg[a + i]))
    print(f"{family}/dflash on {source} ({length} tokens), {anchors} anchors, k = {k}")
    check(failures, bad == 0, f"dflash_ref.py's drafts equal the training code's at all {anchors * k} rows "
                              f"({bad} differ, {ties} near-ties excluded)")
    print(f"     top-1 agreement with the target's greedy token: {hits_mine / (anchors * k):.4f} (training code, "
          f"float32), {hits_ref / (anchors * k):.4f} (float64 reference)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=None, help="also check FAMILY/dflash (the shipped drafter)")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "build", "family", "data"),
                    help="token streams (build_family's WORK/data); without valid.npy, random tokens")
    ap.add_argument("--length", type=int, default=256)
    args = ap.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    failures = []
    unit_checks(failures)
    if args.family:
        family_check(failures, args.family, args.data, args.length)
    print("ok" if not failures else f"{len(failures)} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
