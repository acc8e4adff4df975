"""Checks that the training code computes what the float64 references define.

What it is for
      /usr/bin/python3 tools/train/test_heads.py --family models/baton-tiny-code
  For the family's target, EAGLE-3 head and MTP layer as written on disk:
    - llama.py's forward (float32) vs tools/reference/transformer_ref.py (float64): logits and the
      hidden states the heads read;
    - heads.unroll (the training-time unrolled drafting) vs tools/reference/draft_heads_ref.py,
      the reference the engine's heads are tested against: for several chain starts p, the
      reference drafts k tokens after ids[:p+2]; the training unroll, teacher-forced with those
      same drafts, must give the same logits at every drafting step (EAGLE-3 and MTP), and the
      same logits when only a subset of chains runs the later steps (chain_fraction < 1);
    - the saved EAGLE-3 vocabulary maps are consistent (t2d marks exactly the ids d + d2t[d]).
  Prints the largest differences and exits 1 if any exceeds TOL. With the training code equal to
  draft_heads_ref.py and the engine equal to it (tests/engine/spec/heads_test.cc), what was
  trained is what Baton runs.

What it must not do
  Train anything or write files; loosen TOL to make a failure pass (a float32 vs float64
  difference of this size means different math).
"""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import draft_heads_ref as dh  # noqa: E402
import heads  # noqa: E402
import transformer_ref as ref  # noqa: E402
from llama import load_hf_dir  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402

TOL = 2e-3  # max |float32 - float64| on logits of magnitude ~10


def load_training_heads(family, target):
    e_cfg = json.load(open(os.path.join(family, "eagle3", "config.json")))
    e_raw = read_safetensors(os.path.join(family, "eagle3", "model.safetensors"))
    d2t = e_raw["d2t"]
    draft_ids = (torch.arange(len(d2t)) + d2t).tolist()
    eagle = heads.Eagle3Head(e_cfg, draft_ids)
    eagle.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in e_raw.items()})
    m_raw = read_safetensors(os.path.join(family, "mtp", "model.safetensors"))
    prefix = f"model.layers.{target.config.num_hidden_layers}."
    m_w = {k[len(prefix):]: v.float() for k, v in m_raw.items()}
    mtp = heads.MtpLayer(target.config, m_w.pop("embed_tokens.weight"), m_w.pop("shared_head.head.weight"))
    mtp.load_state_dict(m_w)
    return eagle.eval(), mtp.eval(), e_raw


@torch.no_grad()
def training_chain_logits(target, head, seq, p, steps, chains):
    """heads.unroll over seq (teacher-forced) -> logits of chain p at each step, [V'] each."""
    c = target.config
    ids = torch.tensor([seq])
    _, states = target(ids, states=True)
    if isinstance(head, heads.Eagle3Head):
        aux = torch.cat([states[i] for i in head.config["eagle_aux_hidden_state_layer_ids"]], dim=-1)[:, :-1]
        first, zero0 = head.first_hidden(aux), False
    else:
        first, zero0 = states[-1][:, :-1], True
    out, sel = heads.unroll(head, target.model.embed_tokens.weight, ids, first, steps, c.head_dim, c.rope_theta,
                            zero_pos0_embedding=zero0, chains=chains)
    row = int((sel == p).nonzero()[0, 0])
    return [out[0][0, p]] + [out[j][0, row] for j in range(1, steps)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    tdir = os.path.join(args.family, "target")
    target = load_hf_dir(tdir)
    rt = ref.load_model(tdir)
    ids = [0] + torch.randint(1, target.config.vocab_size, (args.length - 1,)).tolist()
    report = {}
    with torch.no_grad():
        logits, states = target(torch.tensor([ids]), states=True)
    r_logits, r_states = ref.forward(rt, ids, hidden_states=True)
    report["target_logits"] = float((logits[0].double() - r_logits).abs().max())
    report["target_states"] = max(float((s[0].double() - r).abs().max()) for s, r in zip(states, r_states))

    eagle, mtp, e_raw = load_training_heads(args.family, target)
    marked = e_raw["t2d"].nonzero().flatten()
    report["t2d_matches_d2t"] = torch.equal(marked, torch.arange(len(e_raw["d2t"])) + e_raw["d2t"])
    for name, head in (("eagle3", eagle), ("mtp", mtp)):
        r_head = dh.load_head(os.path.join(args.family, name), rt)
        worst, worst_subset = 0.0, 0.0
        for p in (0, 1, args.length // 2, args.length - 3):
            r = dh.run(r_head, rt, ids[:p + 2], args.steps)
            seq = ids[:p + 2] + r["drafts"][:-1]  # chain p teacher-forced with the reference's drafts
            for chains, which in ((None, "all"), (torch.tensor([p]), "subset")):
                got = training_chain_logits(target, head, seq, p, args.steps, chains)
                err = max(float((g.double() - w).abs().max()) for g, w in zip(got, r["draft_logits"]))
                if which == "all":
                    worst = max(worst, err)
                else:
                    worst_subset = max(worst_subset, err)
        report[f"{name}_unroll_vs_reference"] = worst
        report[f"{name}_chain_subset_vs_reference"] = worst_subset
    bad = {k: v for k, v in report.items() if (isinstance(v, float) and v > TOL) or v is False}
    report["ok"] = not bad
    print(json.dumps(report, indent=1))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
