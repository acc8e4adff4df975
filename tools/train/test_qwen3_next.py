"""Checks tools/train/qwen3_next.py against the float64 reference's fixtures.

What it is for
  For each Qwen3NextForCausalLM fixture of a make_fixtures.py --out DIR (without --fixtures it runs
  make_fixtures.py into a temporary directory): load_hf_dir, then in float64 (model.double())
    - the prompt's logits equal reference.json's within 1e-6, for the chunked delta rule and for
      the token-by-token recurrence (and the two agree within 1e-10, also with chunks that do not
      divide T);
    - a cross-entropy backward gives finite gradients, non-zero for every parameter except the
      experts no token was routed to (those get none), the same (within 1e-10) through the chunked
      delta rule as through the recurrence;
    - save_hf_dir -> load_hf_dir is bit-identical (the stored dtype, every tensor, the config).
  Prints one line per fixture and `ok`; exits non-zero on failure.

What it must not do
  Import transformers/safetensors; edit the fixtures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from qwen3_next import Qwen3NextConfig, SparseMoE, load_hf_dir, save_hf_dir  # noqa: E402
from safetensors_io import read_model_dir  # noqa: E402  (path set by llama.py)

TOL = 1e-6


def check_logits(model, ref):
    ids = torch.tensor([ref["prompt_token_ids"]])
    want = torch.tensor(ref["logits"], dtype=torch.float64)
    errors = {}
    outs = {}
    for chunk in (64, 0, 5):
        model.set_chunk(chunk)
        with torch.no_grad():
            outs[chunk] = model(ids)[0]
        errors[chunk] = (outs[chunk] - want).abs().max().item()
    model.set_chunk(64)
    assert errors[64] <= TOL and errors[0] <= TOL, f"logit error {errors} > {TOL}"
    for chunk in (0, 5):
        diff = (outs[chunk] - outs[64]).abs().max().item()
        assert diff <= 1e-10, f"chunked vs recurrent differ by {diff}"
    return errors


def gradients(model, ids, chunk):
    model.set_chunk(chunk)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(ids)[0, :-1], ids[0, 1:]).backward()
    model.set_chunk(64)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def check_gradients(model, ref):
    ids = torch.tensor([ref["prompt_token_ids"]])
    recurrent = gradients(model, ids, 0)
    chunked = gradients(model, ids, 64)
    assert recurrent.keys() == chunked.keys()
    for n in recurrent:
        diff = (recurrent[n] - chunked[n]).abs().max().item()
        assert diff <= 1e-10 * max(1.0, recurrent[n].abs().max().item()), f"{n}: chunked gradient off by {diff}"
    idle = set()  # experts no token reached
    for name, module in model.named_modules():
        if isinstance(module, SparseMoE):
            for e, n in enumerate(module.last_counts.tolist()):
                if n == 0:
                    idle.add(f"{name}.experts.{e}.")
    checked = 0
    for name, p in model.named_parameters():
        if any(name.startswith(prefix) for prefix in idle):
            assert p.grad is None or not p.grad.abs().any(), f"{name}: gradient without routed tokens"
            continue
        assert p.grad is not None, f"{name}: no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: non-finite gradient"
        assert p.grad.abs().max() > 0, f"{name}: zero gradient"
        checked += 1
    model.zero_grad(set_to_none=True)
    return checked, len(idle)


def check_round_trip(model, directory, tmp):
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg["torch_dtype"]]
    out = os.path.join(tmp, os.path.basename(directory) + "-roundtrip")
    save_hf_dir(model, out, dtype)
    again = load_hf_dir(out)
    assert again.config == model.config, "config changed in the round trip"
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), f"{k} changed in the round trip"
    stored, written = read_model_dir(directory), read_model_dir(out)
    assert stored.keys() == written.keys()
    for k in stored:
        assert stored[k].dtype == written[k].dtype and torch.equal(stored[k], written[k]), f"{k} differs from the fixture"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=None, help="a make_fixtures.py --out directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.fixtures
        if root is None:
            root = os.path.join(tmp, "fixtures")
            subprocess.run([sys.executable, os.path.join(HERE, "..", "fixtures", "make_fixtures.py"),
                            "--out", root], check=True, capture_output=True)
        found = 0
        for name in sorted(os.listdir(root)):
            directory = os.path.join(root, name)
            path = os.path.join(directory, "config.json")
            if not os.path.isfile(path):
                continue
            with open(path) as f:
                cfg = json.load(f)
            if cfg.get("architectures", [None])[0] != "Qwen3NextForCausalLM":
                continue
            found += 1
            with open(os.path.join(directory, "reference.json")) as f:
                ref = json.load(f)
            model = load_hf_dir(directory)
            check_round_trip(model, directory, tmp)
            model = model.double()
            errors = check_logits(model, ref)
            checked, idle = check_gradients(model, ref)
            c = Qwen3NextConfig.from_hf(cfg)
            print(f"{name:18s} layers {''.join('F' if t == 'full_attention' else 'L' for t in c.layer_types)}  "
                  f"max logit err chunked {errors[64]:.2e} recurrent {errors[0]:.2e}  "
                  f"grads ok on {checked} params ({idle} idle experts)  round trip bit-identical")
        assert found == 2, f"expected 2 Qwen3NextForCausalLM fixtures in {root}, found {found}"
    print("ok")


if __name__ == "__main__":
    main()
