"""Checks that the training code computes what the float64 references define.

What it is for
      /usr/bin/python3 tools/train/test_heads.py --family models/baton-tiny-code
  For the family's target, EAGLE-3 head and MTP layer as written on disk:
    - llama.py's forward (float32) vs tools/reference/transformer_ref.py (float64): logits and the
      hidden states the heads read;
    - heads.unroll (the training-time unrolled drafting, teacher-forced with the sequence's own
      tokens) vs tools/reference/spec_heads_ref.py's entry-list drafting with the same tokens,
      for every step and several chain starts; for EAGLE-3 and for MTP;
    - the saved tensors round-trip (names, d2t/t2d consistent with the draft vocabulary).
  Prints the largest differences and exits 1 if any exceeds TOL.

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
import heads  # noqa: E402
import spec_heads_ref as sref  # noqa: E402
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
    return eagle.eval(), mtp.eval()


def reference_chain_logits(layer_fn, logits_fn, embed, ids, first_h, p, steps):
    """Reference logits of chain p, teacher-forced: step j reads ids[p + j + 1]."""
    tokens = list(ids[1:p + 2])
    hidden = [first_h[i] for i in range(p + 1)]
    out_logits = []
    for j in range(steps):
        out, _ = layer_fn(embed[torch.as_tensor(tokens)], torch.stack(hidden), torch.arange(len(tokens)))
        out_logits.append(logits_fn(out[-1]))
        if p + j + 2 >= len(ids):
            break
        tokens.append(ids[p + j + 2])
        hidden.append(out[-1])
    return out_logits


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

    eagle, mtp = load_training_heads(args.family, target)
    r_eagle, r_mtp = sref.load_eagle3(os.path.join(args.family, "eagle3")), sref.load_mtp(os.path.join(args.family, "mtp"))
    assert torch.equal(eagle.t2d, r_eagle["t2d"]), "t2d differs from the draft vocabulary implied by d2t"
    c = target.config
    t_ids = torch.tensor([ids])
    aux = torch.cat([states[i] for i in eagle.config["eagle_aux_hidden_state_layer_ids"]], dim=-1)[:, :-1]
    with torch.no_grad():
        e_steps = heads.unroll(eagle, target.model.embed_tokens.weight, t_ids, eagle.first_hidden(aux), args.steps,
                               c.head_dim, c.rope_theta, zero_pos0_embedding=False)
        m_steps = heads.unroll(mtp, target.model.embed_tokens.weight, t_ids, states[-1][:, :-1], args.steps,
                               c.head_dim, c.rope_theta, zero_pos0_embedding=True)
    r_aux = torch.cat([r_states[i][:-1] for i in r_eagle["layers"]], dim=-1)
    r_first = r_aux @ r_eagle["w"]["fc.weight"].T
    embed = rt.weights["model.embed_tokens.weight"]

    def e_logits(o):
        return sref.eagle3_logits(r_eagle, o)

    def m_logits(o):
        return sref.mtp_logits(r_mtp, o)

    worst = {"eagle3": 0.0, "mtp": 0.0}
    for p in (0, 1, args.length // 2, args.length - 3):
        for name, steps_out, fn, lg, first in (
                ("eagle3", e_steps, lambda e, h, pos: sref.eagle3_layer(r_eagle, e, h, pos), e_logits, r_first),
                ("mtp", m_steps, lambda e, h, pos: sref.mtp_layer(r_mtp, e, h, pos), m_logits, r_states[-1][:-1])):
            ref_logits = reference_chain_logits(fn, lg, embed, ids, first, p, args.steps)
            for j, rl in enumerate(ref_logits):
                worst[name] = max(worst[name], float((steps_out[j][0, p].double() - rl).abs().max()))
    report.update({f"{k}_unroll_vs_reference": v for k, v in worst.items()})
    seq = ids[:args.length // 2]
    report["eagle3_draft_example"] = sref.eagle3_draft(rt, r_eagle, seq, args.steps)
    report["mtp_draft_example"] = sref.mtp_draft(rt, r_mtp, seq, args.steps)
    bad = {k: v for k, v in report.items() if isinstance(v, float) and v > TOL}
    report["ok"] = not bad
    print(json.dumps(report, indent=1))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
