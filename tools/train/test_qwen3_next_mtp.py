"""Checks tools/train/qwen3_next_mtp.py against the float64 reference the engine's MTP is tested on.

What it is for
      /usr/bin/python3 tools/train/test_qwen3_next_mtp.py
  On two tiny random Qwen3-Next targets (layer 0 sparse, so the MTP layer has the MoE block and
  tied embeddings; layer 0 dense via mlp_only_layers, so a dense MLP and a separate lm_head) with
  random MTP weights and random norm weights (so a norm that is not zero-centred changes every
  draft), in float64:
    - the trainable module's greedy drafts (qwen3_next_mtp.greedy_drafts, k = 3) equal
      tools/reference/draft_heads_ref.py's for several token sequences, and so do the k logit rows
      the drafts come from, and the catch-up logits at every position, within TOL;
    - the training unroll (teacher-forced with the reference's drafts) gives the reference's logits
      at every drafting step, with all chains and with a subset of chains running the later steps;
    - the reference itself tells the real module from a wrong one: with its norms read as x * w
      instead of x * (1 + w) its drafting logits move by far more than TOL (the comparison has teeth);
    - amp_ready (the bf16-autocast variants of the DeltaNet and the MoE) computes what qwen3_next.py
      computes, logits and gradients;
    - qwen3_next.save_hf_dir(extra_tensors=mtp_tensors(...)) -> load_hf_dir(mtp=True) -> load_mtp
      is bit-identical, in float32 and in bfloat16, and load_hf_dir without mtp=True refuses the
      `mtp.*` tensors.
  Prints one line per target and `ok`; exits non-zero on failure. Runs in a few seconds.

What it must not do
  Import transformers/safetensors; loosen TOL to pass (float64 against float64 differs by rounding
  only); write outside a temporary directory.
"""

import os
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import draft_heads_ref as dh  # noqa: E402
import qwen3_next_mtp as qm  # noqa: E402
import transformer_ref as ref  # noqa: E402
from qwen3_next import Qwen3NextConfig, Qwen3NextForCausalLM, init_weights, load_hf_dir, save_hf_dir  # noqa: E402

TOL = 1e-9
K = 3


def tiny_config(layer0_sparse):
    return Qwen3NextConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, partial_rotary_factor=0.5, rms_norm_eps=1e-6,
        max_position_embeddings=256, tie_word_embeddings=layer0_sparse, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        mlp_only_layers=[] if layer0_sparse else [0], bos_token_id=0, eos_token_id=0)


def random_models(c, seed):
    g = torch.Generator().manual_seed(seed)
    target = init_weights(Qwen3NextForCausalLM(c), std=0.2, generator=g)
    mtp = qm.Qwen3NextMtp(c)
    with torch.no_grad():
        for _, p in sorted(mtp.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() < 2 else 0.25))
        for name, p in sorted(target.named_parameters()):  # norms away from 0, so (1 + w) matters there too
            if name.endswith("norm.weight") and "linear_attn" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return target.double().eval(), mtp.double().eval()


def reference_pair(target, mtp):
    cfg = target.config.to_hf("float64")
    rt = ref.build_model(cfg, {k: v for k, v in target.state_dict().items()})
    head = dh.build_head(dict(cfg, num_nextn_predict_layers=1), qm.mtp_tensors(mtp, torch.float64), rt, "test")
    assert head.layout == "mtp-qwen3next" and head.zero_centred, head.layout
    return rt, head


def max_err(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@torch.no_grad()
def check_drafting(target, mtp, rt, head, sequences):
    worst, worst_catch, worst_unroll = 0.0, 0.0, 0.0
    embed, lm_head = target.model.embed_tokens.weight, target.head_weight()
    for tokens in sequences:
        r = dh.run(head, rt, tokens, K)
        drafts, rows = qm.greedy_drafts(mtp, target, tokens, K)
        assert drafts == r["drafts"], f"drafts {drafts} != reference {r['drafts']} after {tokens}"
        worst = max(worst, max_err(rows, r["draft_logits"]))
        # catch-up logits at every position p = 0..n-2 (step 0 of every chain)
        ids = torch.tensor([tokens])
        _, states = target(ids, states=True)
        steps, _ = qm.unroll(mtp, embed, lm_head, ids, states[-1][:, :-1], 1)
        worst_catch = max(worst_catch, float((steps[0][0] - r["catch_up_logits"][0]).abs().max()))
        # the training unroll, teacher-forced with the reference's drafts, all chains and a subset
        n = len(tokens)
        seq = torch.tensor([tokens + r["drafts"][:-1]])
        _, states = target(seq, states=True)
        p = n - 2
        for chains in (None, torch.tensor([0, p])):
            steps, sel = qm.unroll(mtp, embed, lm_head, seq, states[-1][:, :-1], K, chains)
            row = int((sel == p).nonzero()[0, 0])
            got = [steps[0][0, p]] + [steps[j][0, row] for j in range(1, K)]
            worst_unroll = max(worst_unroll, max_err(got, r["draft_logits"]))
    assert worst <= TOL, f"draft logits differ from the reference by {worst}"
    assert worst_catch <= TOL, f"catch-up logits differ from the reference by {worst_catch}"
    assert worst_unroll <= TOL, f"unrolled training logits differ from the reference by {worst_unroll}"
    return worst, worst_catch, worst_unroll


def check_teeth(rt, head, tokens, reference_rows):
    """The reference with plain x * w norms (the wrong module) must draft visibly differently."""
    head.zero_centred = False
    for b in head.blocks:
        b.zero_centred = False
    try:
        wrong = dh.run(head, rt, tokens, K)["draft_logits"]
    finally:
        head.zero_centred = True
        for b in head.blocks:
            b.zero_centred = True
    diff = max_err(wrong, reference_rows)
    assert diff > 1e3 * TOL, f"non-zero-centred norms change the logits by only {diff}"
    return diff


def check_amp_ready(target, mtp, tokens):
    """amp_ready's classes compute qwen3_next.py's logits and gradients (float64, no autocast)."""
    ids = torch.tensor([tokens])
    plain = {}
    for which in ("plain", "amp"):
        if which == "amp":
            qm.amp_ready(target)
            qm.amp_ready(mtp)
        target.zero_grad(set_to_none=True)
        target.train()
        logits = target(ids)
        F.cross_entropy(logits[0, :-1], ids[0, 1:]).backward()
        qm.moe_aux_loss(target)
        grads = {n: p.grad.clone() for n, p in target.named_parameters() if p.grad is not None}
        target.eval()
        if which == "plain":
            plain = (logits.detach(), grads)
    assert type(target.model.layers[0].linear_attn) is qm.AmpGatedDeltaNet
    err = float((logits.detach() - plain[0]).abs().max())
    assert err <= TOL, f"amp_ready logits differ by {err}"
    assert grads.keys() == plain[1].keys()
    gerr = max(float((grads[n] - plain[1][n]).abs().max()) for n in grads)
    assert gerr <= TOL, f"amp_ready gradients differ by {gerr}"
    target.zero_grad(set_to_none=True)
    return err, gerr


def check_round_trip(target, mtp, tmp):
    for dtype in (torch.float32, torch.bfloat16):
        out = os.path.join(tmp, f"rt-{dtype}")
        t32 = Qwen3NextForCausalLM(target.config)
        t32.load_state_dict({k: v.float() for k, v in target.state_dict().items()})
        tensors = qm.mtp_tensors(mtp, dtype)
        save_hf_dir(t32, out, dtype, extra_config={"num_nextn_predict_layers": 1}, extra_tensors=tensors)
        try:
            load_hf_dir(out)
        except ValueError as e:
            assert "mtp" in str(e)
        else:
            raise AssertionError("load_hf_dir without mtp=True accepted mtp.* tensors")
        model, split = load_hf_dir(out, mtp=True)
        assert model.config == target.config, "config changed in the round trip"
        assert sorted(split) == sorted(tensors)
        for k in tensors:
            assert split[k].dtype == dtype and torch.equal(split[k], tensors[k]), f"{k} changed"
        back = qm.load_mtp(model.config, split)
        again = qm.mtp_tensors(back, dtype)
        assert all(torch.equal(again[k], tensors[k]) for k in tensors), "load_mtp -> mtp_tensors changed a tensor"
        for k, v in model.state_dict().items():
            assert torch.equal(v, target.state_dict()[k].to(dtype).float()), f"target tensor {k} changed"


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # init_weights leaves the DeltaNet in_proj_* at torch's default init
    g = torch.Generator().manual_seed(5)
    with tempfile.TemporaryDirectory() as tmp:
        for name, sparse, seed in (("moe-tied", True, 11), ("dense-untied", False, 12)):
            c = tiny_config(sparse)
            target, mtp = random_models(c, seed)
            assert isinstance(mtp.layers[0].mlp, qm.SparseMoE) == sparse
            rt, head = reference_pair(target, mtp)
            sequences = [[0] + torch.randint(1, c.vocab_size, (n - 1,), generator=g).tolist() for n in (2, 5, 9, 23)]
            errs = check_drafting(target, mtp, rt, head, sequences)
            r = dh.run(head, rt, sequences[-1], K)
            teeth = check_teeth(rt, head, sequences[-1], r["draft_logits"])
            amp = check_amp_ready(target, mtp, sequences[-1])
            check_round_trip(target, mtp, tmp)
            print(f"{name:13s} drafts equal (k={K}, {len(sequences)} sequences); max logit err drafts {errs[0]:.1e} "
                  f"catch-up {errs[1]:.1e} unroll {errs[2]:.1e}; x*w norms would move them by {teeth:.2f}; "
                  f"amp_ready err {amp[0]:.1e} / grads {amp[1]:.1e}; round trip bit-identical")
    print("ok")


if __name__ == "__main__":
    main()
