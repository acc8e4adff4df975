"""Checks the Medusa heads' training code (medusa.py, train_medusa.py) and, optionally, the shipped heads.

What it is for
      /usr/bin/python3 tools/train/test_medusa.py                      # unit checks, seconds
      /usr/bin/python3 tools/train/test_medusa.py --family models/baton-tiny-code [--data build/family/data]
  On a tiny random Llama target (seeded):
    - layout: save_medusa writes exactly vLLM's MedusaModel config and tensors (names, shapes,
      BF16 weights, I64 token_map, nothing else) and load_medusa reads them back;
    - wiring: with Medusa's init (W = 0, lm heads = the target's rows of token_map) every head's
      logits are the target's own next-token logits over the draft vocabulary, so head i drafts
      the target's argmax at p + 1 where it should predict p + 2 + i, and the agreement
      medusa_losses counts is exactly that of the target's argmax with itself shifted by 1 + i;
    - training: a short train_medusa run lowers the loss, leaves the target's weights untouched
      and is bit-for-bit reproducible;
    - the saved heads equal tools/reference/draft_heads_ref.py (float64, the reference the
      engine's MedusaHead is tested against) on the same target.
  With --family: the shipped FAMILY/medusa on one validation window (the first of DATA's
  valid.npy, else seeded random tokens): the drafts of heads 0..3 recomputed from the saved files
  in float64 (the target by transformer_ref.py, the heads by plain torch) and by draft_heads_ref.py
  must equal those medusa_losses (the training code's evaluation) reports, except at near-ties;
  prints both per-head agreements for that window.
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
import draft_heads_ref as dh  # noqa: E402
import medusa  # noqa: E402
import train_medusa  # noqa: E402
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
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    model = LlamaForCausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(5))
    with torch.no_grad():  # a peaked next-token distribution (Normal(0, 0.02) gives a nearly uniform one)
        model.model.embed_tokens.weight.mul_(50.0)
    d = os.path.join(tmp, "target")
    save_hf_dir(model, d, torch.bfloat16)
    return load_hf_dir(d), d  # BF16 as saved, upcast (as build_family loads the shipped target)


def unit_checks(failures):
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        target, tdir = tiny_target(tmp)
        c = target.config
        token_map = sorted(torch.randperm(c.vocab_size, generator=torch.Generator().manual_seed(1))[:64].tolist())
        heads = medusa.MedusaHeads(c.hidden_size, c.vocab_size, 4, 1, token_map)
        medusa.init_from_target(heads, target)

        # Wiring at init: logits = the target's own over token_map; drafts = its argmax at p + 1.
        ids = torch.cat([torch.zeros(3, 1, dtype=torch.long), torch.randint(1, c.vocab_size, (3, 40))], dim=1)
        with torch.no_grad():
            t_logits, states = target(ids, states=True)
            outs = heads(states[-1])
        own = t_logits[..., heads.token_map]
        check(failures, all(torch.allclose(o, own, atol=1e-5, rtol=0) for o in outs),
              "zero-init heads' logits are the target's next-token logits over the draft vocabulary")
        expected = heads.token_map[own.argmax(-1)]
        _, _, counts, drafts, t_arg = train_medusa.medusa_losses(target, heads, ids, "cpu", amp=False)
        check(failures, all(torch.equal(drafts[i], expected) for i in range(4)),
              "zero-init head i drafts the target's argmax at p + 1 (over the draft vocabulary)")
        in_draft = heads.in_draft[t_arg]
        check(failures, bool(in_draft.any()) and torch.equal(expected[in_draft], t_arg[in_draft]),
              "... which is the target's own greedy token wherever that is in the draft vocabulary")
        t = ids.shape[1]
        want = [[int((expected[:, :t - 1 - i] == t_arg[:, 1 + i:]).sum()), 3 * (t - 1 - i)] for i in range(4)]
        check(failures, counts == want, f"agreement of head i is counted against the target's argmax at p + 1 + i "
                                        f"(init: {counts})")

        # Training: loss falls, target untouched, reproducible. The stream cycles through 11 tokens,
        # so the token at p determines the next ones and with them the target's later distributions.
        stream = np.tile(np.random.RandomState(2).randint(1, c.vocab_size, 11), 400).astype(np.int64)
        windows = data.valid_windows(stream, 33, 8)
        before = {k: v.clone() for k, v in target.state_dict().items()}
        loss0 = train_medusa.evaluate_medusa(target, heads, windows, 4, "cpu")[0]
        runs = []
        for _ in range(2):
            h = medusa.MedusaHeads(c.hidden_size, c.vocab_size, 4, 1, token_map)
            medusa.init_from_target(h, target)
            log = []
            train_medusa.train_medusa(target, h, stream, windows, steps=25, batch=4, seq_len=32, lr=1e-2, warmup=3,
                                      seed=7, device="cpu", amp=False, eval_every=10, eval_windows=4, log=log)
            runs.append(h)
        loss1 = train_medusa.evaluate_medusa(target, runs[0], windows, 4, "cpu")[0]
        check(failures, loss1 < loss0 - 0.05, f"training lowers the validation loss ({loss0} -> {loss1})")
        check(failures, all(torch.equal(before[k], v) for k, v in target.state_dict().items()),
              "the target's weights are unchanged")
        check(failures, all(torch.equal(a, b) for a, b in zip(runs[0].state_dict().values(),
                                                              runs[1].state_dict().values())),
              "two training runs give identical heads")
        check(failures, any(float(b.layers[0].weight.abs().max()) > 0 for b in runs[0].blocks),
              "training moved the residual weights off zero")
        h = medusa.MedusaHeads(c.hidden_size, c.vocab_size, 4, 1, token_map)
        medusa.init_from_target(h, target)
        train_medusa.train_medusa(target, h, stream, windows, steps=25, batch=4, seq_len=32, lr=1e-2, warmup=3,
                                  seed=7, device="cpu", amp=False, eval_every=0, eval_windows=0, log=[], micro_batch=2)
        loss2 = train_medusa.evaluate_medusa(target, h, windows, 4, "cpu")[0]
        check(failures, abs(loss2 - loss1) < 1e-2 * loss1, f"micro-batches of 2 train the same heads (loss {loss2})")

        # Layout.
        mdir = os.path.join(tmp, "medusa")
        medusa.save_medusa(runs[0], mdir)
        cfg = json.load(open(os.path.join(mdir, "config.json")))
        check(failures, cfg == {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": 32,
                                "vocab_size": 96, "medusa_num_heads": 4, "medusa_num_layers": 1,
                                "truncated_vocab_size": 64}, f"config.json {cfg}")
        check(failures, sorted(os.listdir(mdir)) == ["config.json", "model.safetensors"], "only the two files")
        stored = read_safetensors(os.path.join(mdir, "model.safetensors"))
        want = {f"blocks.{i}.layers.0.weight": ([32, 32], torch.bfloat16) for i in range(4)}
        want.update({f"lm_heads.{i}.weight": ([64, 32], torch.bfloat16) for i in range(4)})
        want["token_map"] = ([64], torch.int64)
        got = {k: (list(v.shape), v.dtype) for k, v in stored.items()}
        check(failures, got == want, f"tensors {got}")
        check(failures, stored["token_map"].tolist() == token_map, "token_map is the draft vocabulary")
        loaded = medusa.load_medusa(mdir)
        check(failures, all(torch.equal(v.float(), loaded.state_dict()[k]) for k, v in stored.items()
                            if k != "token_map"), "load_medusa reads the stored weights back")

        # The saved heads vs the float64 reference the engine is tested against.
        rt = ref.load_model(tdir)
        rh = dh.load_head(mdir, rt)
        seq = ids[0].tolist()
        r = dh.run(rh, rt, seq, 4)
        with torch.no_grad():
            _, st = target(torch.tensor([seq]), states=True)
            outs = loaded(st[-1][0, :-1])
        err = max(float((o.double() - w).abs().max()) for o, w in zip(outs, r["catch_up_logits"]))
        check(failures, err < TOL, f"saved heads vs draft_heads_ref.py: max |logit diff| {err:.2e}")
        check(failures, [int(loaded.token_map[o[-1].argmax()]) for o in outs] == r["drafts"],
              f"drafts after the sequence equal the reference's {r['drafts']}")


def family_check(failures, family, data_dir, length):
    tdir, mdir = os.path.join(family, "target"), os.path.join(family, "medusa")
    target = load_hf_dir(tdir)
    heads = medusa.load_medusa(mdir)
    path = os.path.join(data_dir, "valid.npy") if data_dir else None
    if path and os.path.exists(path):
        window = data.valid_windows(data.load_stream(data_dir, "valid"), length + 1, 1)[0, :-1]
        source = f"validation window 0 of {path}"
    else:
        g = torch.Generator().manual_seed(3)
        window = torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(1, target.config.vocab_size,
                                                                             (length - 1,), generator=g)])
        source = "seeded random tokens"
    ids = window[None]
    t = ids.shape[1]
    with torch.no_grad():
        _, _, counts, drafts, t_arg = train_medusa.medusa_losses(target, heads, ids, "cpu", amp=False)

    # Float64 from the saved files: the target by transformer_ref.py, the heads by plain torch.
    rt = ref.load_model(tdir)
    r_logits, r_states = ref.forward(rt, window.tolist(), hidden_states=True)
    final = r_states[-1]  # [T, H] float64, the final-norm output
    r_arg = r_logits.argmax(-1)
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    stored = read_safetensors(os.path.join(mdir, "model.safetensors"))
    token_map = stored["token_map"]
    rh = dh.run(dh.load_head(mdir, rt), rt, window.tolist(), 1)["catch_up_logits"]
    print(f"{family}/medusa on {source} ({t} tokens)")
    for i in range(cfg["medusa_num_heads"]):
        x = final
        for layer in range(cfg["medusa_num_layers"]):
            x = x + torch.nn.functional.silu(x @ stored[f"blocks.{i}.layers.{layer}.weight"].double().T)
        logits = x @ stored[f"lm_heads.{i}.weight"].double().T
        top2 = logits.topk(2, dim=-1)
        plain = token_map[top2.indices[:, 0]]
        sure = (top2.values[:, 0] - top2.values[:, 1]) >= TIE
        n = t - 1 - i
        bad = int(((plain != drafts[i, 0]) & sure)[:n].sum())
        ties = int((~sure[:n]).sum())
        check(failures, bad == 0, f"head {i}: float64 drafts equal the training code's at all {n} positions "
                                  f"({bad} differ, {ties} near-ties excluded)")
        err = float((logits[:-1] - rh[i]).abs().max())
        check(failures, err < 1e-9, f"head {i}: plain float64 logits equal draft_heads_ref.py's ({err:.1e})")
        agree64 = int((plain[:n] == r_arg[1 + i:]).sum()) / n
        print(f"     head {i} (token at p + {2 + i}): top-1 agreement with the target's greedy token "
              f"{counts[i][0] / counts[i][1]:.4f} (training code, float32), {agree64:.4f} (float64)")
    print(f"     the target's greedy tokens: float32 vs float64 differ at {int((r_arg != t_arg[0]).sum())} of "
          f"{t} positions")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=None, help="also check FAMILY/medusa (the shipped heads)")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "build", "family", "data"),
                    help="token streams (build_family's WORK/data); without valid.npy, random tokens")
    ap.add_argument("--length", type=int, default=512)
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
