"""Float64 reference for Baton's model-based proposers: EAGLE-1, EAGLE-3, MTP, Medusa heads and draft models.

What it is for
  Ground truth for the speculative-decoding tests (tools/fixtures/make_spec_fixtures.py writes
  it into spec/reference.json), and answering "what should this head draft?" for any tiny head:

    /usr/bin/python3 tools/reference/draft_heads_ref.py --target DIR --head DIR \
        --method eagle|eagle3|mtp|medusa|draft_model|dflash --tokens 1,2,3 --k 4   # -> {"drafts": [...]}

  The layout is detected from the head's config and tensor names:
    eagle          yuhuili EAGLE-1: fc.weight [H, 2H] (+ fc.bias), layers.0.* without
                   input_layernorm; the target's embeddings and lm_head, no final norm.
    eagle3         LlamaForCausalLMEagle3 (prefix midlayer.) or speculators Eagle3Speculator
                   (prefix layers.0., transformer_layer_config): fc [H, 3 H_t], a 2H-input layer,
                   norm, lm_head [D, H], d2t (target = draft + d2t[draft]), t2d.
    mtp-deepseek   model.layers.{N+i}.{enorm, hnorm, eh_proj, shared_head.{norm, head},
                   embed_tokens} + a decoder block, N = target layers, num_nextn_predict_layers.
    mtp-qwen3next  mtp.{fc, pre_fc_norm_embedding, pre_fc_norm_hidden, layers.i, norm}; the
                   target's embeddings and lm_head. The layers follow the head config's
                   architectures[0]:
                     Qwen3NextForCausalLM (the real module): every RMSNorm (mtp.*, input/post
                       norms, per-head q/k norms) is zero-centred, x * rsqrt(mean x^2 + eps) *
                       (1 + w); each mtp.layers.i is a Qwen3-Next full-attention layer as in
                       transformer_ref.py: q_proj [2 * heads * head_dim, H] gives per head
                       [query | gate], k/v/o_proj, q/k norms before RoPE on the first
                       head_dim * partial_rotary_factor dims, output * sigmoid(gate) before
                       o_proj; its MLP is the MoE block (mlp.gate, mlp.experts.e.*,
                       mlp.shared_expert.*, mlp.shared_expert_gate) when the config's rule says
                       layer i is sparse (i not in mlp_only_layers, num_experts > 0,
                       (i + 1) % decoder_sparse_step == 0), else the dense SiLU MLP.
                       Config defaults as transformer_ref.py's Qwen3-Next (head_dim 256,
                       partial_rotary_factor 0.25, rms_norm_eps 1e-6, 512 experts, top 10,
                       norm_topk_prob); the MoE sizes must be given.
                     anything else (a simplified layout): plain Qwen3 blocks (dense MLP, q/k
                       norm, full rotary, ungated attention), RMSNorm x * w.
    medusa         vLLM's MedusaModel (config architectures MedusaModel / model_type medusa, or
                   blocks.{h}.layers.{l}.weight tensors): residual blocks and an lm head per
                   head, all reading the target's final hidden state; everything about it is
                   in medusa_ref.py.
    draft_model    a full HF-layout decoder (transformer_ref.py) with the target's vocab_size.
    dflash         DFlashDraftModel (config dflash_config): fc over target layer outputs, a block of
                   mask tokens drafted in one pass; everything about it is in dflash_ref.py.

Semantics (the contract Baton implements). Tokens t_0..t_{n-1}; the target's states at p are
  final_p (final-norm output) and aux_p = cat(input of layer a for a in aux ids). Head position p
  consumes (feature f_p, token t_{p+1}), predicts the token at p + 2, and attends causally (RoPE at
  p, the head's own rope) over the K/V it has cached, one cache per head layer.
    eagle    x = fc(cat(embed(t), f)) [+ fc.bias]; residual = attention input = x; out = layer
             output (pre-norm); logits = target lm_head(out). f = final_p.
    eagle3   g = fc(aux_p) for a target feature, else g = f (a previous head output); attention
             input = cat(input_layernorm(embed(t)), hidden_norm(g)); residual = g, or
             hidden_norm(g) when norm_before_residual; logits = lm_head(norm(out)) over the draft
             vocab; draft id d -> target id d + d2t[d].
    mtp-ds   e = embed_tokens_layer(t), zeroed at p == 0; x = eh_proj(cat(enorm(e), hnorm(f)));
             a normal decoder layer on x; logits = shared_head.head(shared_head.norm(out)).
    mtp-q3n  x = fc(cat(pre_fc_norm_embedding(embed(t)), pre_fc_norm_hidden(f))); the layer
             (Qwen3-Next full attention + MoE/MLP, or the simplified Qwen3 block) on x;
             logits = target lm_head(mtp.norm(out)); no position-0 zeroing; the feature fed
             back while drafting is mtp.norm(out) (vLLM's qwen3_next_mtp returns it normed).
  Drafting k greedily after t_0..t_{n-1}: every head layer catches up on p = 0..n-2 with target
  features; d_1 = argmax at p = n-2 of layer 0; step j = 1..k-1 runs layer j mod L at p = n-2+j
  with token d_j and f = out of the previous step (pre-norm; normed for mtp-q3n). A layer attends
  over every position up to the one it runs at: before it runs at step j it first runs at each
  earlier drafting position p = n-2+i (1 <= i < j) it has not computed, with that position's token
  d_i and feature (the output of step i-1), so its cache has no gaps where other layers ran. An
  EAGLE-3 head that ships embed_tokens uses its own embeddings. A draft model drafts by plain
  greedy decoding (no EOS stop). Medusa and DFlash: see medusa_ref.py and dflash_ref.py.

What it must not do
  Import `transformers`/`safetensors` or copy their code; guess: unknown layouts, tensors it does
  not consume, shape or size mismatches with the target are errors. Speed is not a goal.
"""

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import transformer_ref as ref  # noqa: E402
from safetensors_io import read_model_dir  # noqa: E402

METHODS = ("eagle", "eagle3", "mtp", "medusa", "draft_model", "dflash")
METHOD_OF_LAYOUT = {"eagle": "eagle", "eagle3": "eagle3", "mtp-deepseek": "mtp",
                    "mtp-qwen3next": "mtp", "medusa": "medusa", "draft_model": "draft_model",
                    "dflash": "dflash"}


@dataclass
class Block:
    """One decoder layer: weights by short name (q k v o post_norm [input_norm] [q_norm k_norm],
    then the dense MLP gate up down, or the MoE router, e{e}.gate/up/down, shared.gate/up/down,
    shared_gate), float64."""
    w: dict = field(repr=False)
    n_heads: int
    n_kv_heads: int
    head_dim: int
    eps: float
    inv_freq: torch.Tensor  # [rotary_dim / 2]; RoPE rotates the first rotary_dim dims of a head
    zero_centred: bool = False  # its RMSNorms scale by (1 + w)
    attn_gate: bool = False  # q_proj yields per head [query | gate]; output * sigmoid(gate)
    n_experts: int = 0  # > 0: the MLP is a mixture of experts plus the gated shared expert
    top_k: int = 0
    norm_topk_prob: bool = False


@dataclass
class Head:
    layout: str
    config: dict
    hidden: int
    eps: float
    blocks: list  # one per head layer
    w: dict = field(repr=False)  # non-block tensors, float64 (per MTP layer: "{i}.name")
    draft_vocab: int = 0  # logits width
    aux_layers: list = field(default_factory=list)  # eagle3
    norm_before_residual: bool = False  # eagle3
    d2t: torch.Tensor = None  # eagle3, int64 [D]
    t2d: torch.Tensor = None  # eagle3, bool [V]
    draft_model: ref.Model = None  # draft_model
    zero_centred: bool = False  # mtp-qwen3next with a Qwen3NextForCausalLM config: (1 + w) norms
    num_heads: int = 0  # medusa: heads (w "{i}.{l}.weight" / "{i}.{l}.bias" / "{i}.lm_head")
    residual_layers: int = 0  # medusa: residual layers per head
    logit_scale: float = 1.0  # medusa
    token_map: torch.Tensor = None  # medusa with a truncated vocab: int64 [D], draft id -> target id

    @property
    def method(self):
        return METHOD_OF_LAYOUT[self.layout]


# ----------------------------------------------------------------------------- loading


class Tensors:
    """The stored tensors, handed out by name; unconsumed names are an error at the end."""

    def __init__(self, stored, where):
        self.stored, self.where, self.used = stored, where, set()

    def take(self, name, shape=None, raw=False):
        if name not in self.stored:
            raise ValueError(f"{self.where}: missing tensor {name}")
        t = self.stored[name]
        if shape is not None and list(t.shape) != list(shape):
            raise ValueError(f"{self.where}: {name} has shape {list(t.shape)}, expected {list(shape)}")
        self.used.add(name)
        return t if raw else t.to(torch.float64)

    def finish(self):
        extra = sorted(set(self.stored) - self.used)
        if extra:
            raise ValueError(f"{self.where}: unexpected tensors {extra[:5]}")


def check_head_features(cfg, where, attention_bias=False):
    """SiLU and no biases (attention biases where the head's layout has them): what every head
    layer here computes."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{where}: unsupported hidden_act {cfg['hidden_act']!r}")
    if (cfg.get("attention_bias") and not attention_bias) or cfg.get("mlp_bias"):
        raise ValueError(f"{where}: attention/mlp biases are not supported in heads")


def layer_geometry(cfg, where, attention_bias=False):
    check_head_features(cfg, where, attention_bias)
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or h // nh
    inv = ref.rope_inv_freq(hd, float(cfg.get("rope_theta", 10000.0)), cfg.get("rope_scaling"))
    return h, nh, nkv, hd, cfg["intermediate_size"], float(cfg["rms_norm_eps"]), inv


def load_block(ts, prefix, cfg, in_width, input_norm, qk_norm, attention_bias=False):
    """One layer's weights; with attention_bias also "{q,k,v,o}_bias" (DFlash layers only)."""
    h, nh, nkv, hd, inter, eps, inv = layer_geometry(cfg, ts.where, attention_bias)
    w = {"q": ts.take(prefix + "self_attn.q_proj.weight", [nh * hd, in_width]),
         "k": ts.take(prefix + "self_attn.k_proj.weight", [nkv * hd, in_width]),
         "v": ts.take(prefix + "self_attn.v_proj.weight", [nkv * hd, in_width]),
         "o": ts.take(prefix + "self_attn.o_proj.weight", [h, nh * hd]),
         "gate": ts.take(prefix + "mlp.gate_proj.weight", [inter, h]),
         "up": ts.take(prefix + "mlp.up_proj.weight", [inter, h]),
         "down": ts.take(prefix + "mlp.down_proj.weight", [h, inter]),
         "post_norm": ts.take(prefix + "post_attention_layernorm.weight", [h])}
    if input_norm:
        w["input_norm"] = ts.take(prefix + "input_layernorm.weight", [h])
    if qk_norm:
        w["q_norm"] = ts.take(prefix + "self_attn.q_norm.weight", [hd])
        w["k_norm"] = ts.take(prefix + "self_attn.k_norm.weight", [hd])
    if attention_bias:
        for proj, n in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd), ("o", h)):
            w[proj + "_bias"] = ts.take(prefix + f"self_attn.{proj}_proj.bias", [n])
    assert nh % nkv == 0 and hd % 2 == 0
    return Block(w, nh, nkv, hd, eps, inv)


def read_json(path):
    with open(path) as f:
        return json.load(f)


MEDUSA_BLOCK = re.compile(r"(medusa_heads\.)?blocks\.\d+\.layers\.\d+\.weight")


def detect_layout(cfg, names):
    archs = cfg.get("architectures") or []
    if "DFlashDraftModel" in archs or "dflash_config" in cfg:  # before eagle3 / eagle: it has d2t, fc
        return "dflash"
    if "MedusaModel" in archs or cfg.get("model_type") == "medusa" or any(MEDUSA_BLOCK.fullmatch(n) for n in names):
        return "medusa"
    if "d2t" in names or cfg.get("speculators_model_type") == "eagle3" or any("Eagle3" in a for a in archs):
        return "eagle3"
    if any(n.startswith("mtp.") for n in names):
        return "mtp-qwen3next"
    if any(re.fullmatch(r"model\.layers\.\d+\.eh_proj\.weight", n) for n in names):
        return "mtp-deepseek"
    if "fc.weight" in names:
        return "eagle"
    if "model.embed_tokens.weight" in names:
        return "draft_model"
    raise ValueError(f"unrecognised head layout (architectures {archs})")


def load_head(head_dir, target):
    """Read a head / draft model directory; `target` is its transformer_ref.Model."""
    cfg = read_json(os.path.join(head_dir, "config.json"))
    return build_head(cfg, read_model_dir(head_dir), target, head_dir, ref.eos_ids_of(head_dir, cfg))


def build_head(cfg, stored, target, where="head", eos_ids=()):
    """Head from a config dict and dict name -> tensor (as stored); `where` names it in errors."""
    layout = detect_layout(cfg, stored)
    ts = Tensors(stored, where)
    ht, vocab = target.hidden, target.weights["lm_head.weight"].shape[0]
    if layout == "draft_model":
        model = ref.build_model(cfg, stored, eos_ids)
        if cfg["vocab_size"] != vocab:
            raise ValueError(f"{where}: draft vocab_size {cfg['vocab_size']} != target vocab_size {vocab}")
        return Head(layout, cfg, model.hidden, model.eps, [], {}, vocab, draft_model=model)
    if layout == "medusa":
        import medusa_ref  # here, not at the top: it imports this module
        return medusa_ref.load_medusa(stored, cfg, ht, vocab, where)
    if layout == "eagle":
        return load_eagle(ts, cfg, ht, vocab)
    if layout == "eagle3":
        return load_eagle3(ts, cfg, target, vocab)
    if layout == "dflash":
        import dflash_ref  # here, not at the top: it imports this module
        return dflash_ref.load_dflash(ts, cfg, target, vocab)
    if layout == "mtp-deepseek":
        return load_mtp_deepseek(ts, cfg, target, vocab)
    return load_mtp_qwen3next(ts, cfg, target, vocab)


def load_eagle(ts, cfg, ht, vocab):
    h = cfg["hidden_size"]
    if h != ht or cfg.get("num_hidden_layers", 1) != 1:
        raise ValueError(f"{ts.where}: EAGLE head needs hidden_size == target's ({h} vs {ht}) and 1 layer")
    w = {"fc": ts.take("fc.weight", [h, 2 * h])}
    if "fc.bias" in ts.stored:
        w["fc_bias"] = ts.take("fc.bias", [h])
    block = load_block(ts, "layers.0.", cfg, h, input_norm=False, qk_norm=False)
    ts.finish()
    return Head("eagle", cfg, h, block.eps, [block], w, vocab)


def load_eagle3(ts, cfg, target, vocab):
    speculators = cfg.get("speculators_model_type") == "eagle3"
    layer_cfg = cfg["transformer_layer_config"] if speculators else cfg
    prefix = "layers.0." if speculators else "midlayer."
    h, ht = layer_cfg["hidden_size"], cfg.get("target_hidden_size") or layer_cfg["hidden_size"]
    d = cfg.get("draft_vocab_size") or vocab
    if ht != target.hidden or h != target.hidden:
        # The embedding is the target's, so the head's width must be the target's too.
        raise ValueError(f"{ts.where}: hidden {h} / target_hidden_size {ht} != target hidden {target.hidden}")
    if layer_cfg.get("vocab_size", vocab) != vocab or layer_cfg.get("num_hidden_layers", 1) != 1:
        raise ValueError(f"{ts.where}: vocab_size must be the target's ({vocab}) and num_hidden_layers 1")
    aux = cfg.get("eagle_aux_hidden_state_layer_ids")
    if aux is None:
        n = target.n_layers
        aux = [2, n // 2, n - 3]
    if len(aux) != 3 or not all(0 <= a < target.n_layers for a in aux):
        raise ValueError(f"{ts.where}: eagle_aux_hidden_state_layer_ids {aux} invalid for {target.n_layers} layers")
    w = {"fc": ts.take("fc.weight", [h, 3 * ht]),
         "hidden_norm": ts.take(prefix + "hidden_norm.weight", [h]),
         "norm": ts.take("norm.weight", [h]),
         "lm_head": ts.take("lm_head.weight", [d, h])}
    for name in ("embed_tokens.weight", "model.embed_tokens.weight"):  # its own embeddings, if shipped
        if name in ts.stored:
            w["embed"] = ts.take(name, [vocab, h])
    block = load_block(ts, prefix, layer_cfg, 2 * h, input_norm=True, qk_norm=False)
    if "d2t" in ts.stored or d != vocab:
        d2t, t2d = ts.take("d2t", [d], raw=True), ts.take("t2d", [vocab], raw=True)
    else:  # a full-vocabulary head may omit the mapping
        d2t, t2d = torch.zeros(d, dtype=torch.int64), torch.ones(vocab, dtype=torch.bool)
    if d2t.dtype != torch.int64 or t2d.dtype != torch.bool:
        raise ValueError(f"{ts.where}: d2t must be I64 and t2d BOOL, got {d2t.dtype} / {t2d.dtype}")
    mapped = torch.arange(d) + d2t
    if int(mapped.min()) < 0 or int(mapped.max()) >= vocab:
        raise ValueError(f"{ts.where}: d2t maps outside the target vocab")
    ts.finish()
    return Head("eagle3", cfg, h, block.eps, [block], w, d, aux_layers=list(aux),
                norm_before_residual=bool(cfg.get("norm_before_residual", False)), d2t=d2t, t2d=t2d)


def check_same_geometry(ts, cfg, target):
    keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
            "vocab_size", "rms_norm_eps", "rope_theta", "rope_scaling")
    diff = [k for k in keys if cfg.get(k) != target.config.get(k)]
    if diff:
        raise ValueError(f"{ts.where}: MTP config differs from the target's in {diff}")


def load_mtp_deepseek(ts, cfg, target, vocab):
    check_same_geometry(ts, cfg, target)
    h, n0, n_mtp = cfg["hidden_size"], cfg["num_hidden_layers"], cfg.get("num_nextn_predict_layers")
    if not n_mtp or n0 != target.n_layers:
        raise ValueError(f"{ts.where}: needs num_nextn_predict_layers >= 1 and num_hidden_layers == target's")
    w, blocks = {}, []
    for i in range(n_mtp):
        p = f"model.layers.{n0 + i}."
        w[f"{i}.enorm"] = ts.take(p + "enorm.weight", [h])
        w[f"{i}.hnorm"] = ts.take(p + "hnorm.weight", [h])
        w[f"{i}.eh_proj"] = ts.take(p + "eh_proj.weight", [h, 2 * h])
        w[f"{i}.head_norm"] = ts.take(p + "shared_head.norm.weight", [h])
        w[f"{i}.head"] = ts.take(p + "shared_head.head.weight", [vocab, h])
        w[f"{i}.embed"] = ts.take(p + "embed_tokens.weight", [vocab, h])
        blocks.append(load_block(ts, p, cfg, h, input_norm=True, qk_norm=target.qk_norm))
    ts.finish()
    return Head("mtp-deepseek", cfg, h, float(cfg["rms_norm_eps"]), blocks, w, vocab)


QWEN3_NEXT_MTP_KEYS = ("partial_rotary_factor", "num_experts", "num_experts_per_tok", "norm_topk_prob",
                      "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step",
                      "mlp_only_layers")


def load_mtp_qwen3next(ts, cfg, target, vocab):
    check_same_geometry(ts, cfg, target)
    real = (cfg.get("architectures") or [None])[0] == "Qwen3NextForCausalLM"
    if real:
        diff = [k for k in QWEN3_NEXT_MTP_KEYS if cfg.get(k) != target.config.get(k)]
        if diff:
            raise ValueError(f"{ts.where}: MTP config differs from the target's in {diff}")
    h, n_mtp = cfg["hidden_size"], cfg.get("num_nextn_predict_layers")
    if not n_mtp:
        raise ValueError(f"{ts.where}: needs num_nextn_predict_layers >= 1")
    w = {"fc": ts.take("mtp.fc.weight", [h, 2 * h]),
         "pre_embed": ts.take("mtp.pre_fc_norm_embedding.weight", [h]),
         "pre_hidden": ts.take("mtp.pre_fc_norm_hidden.weight", [h]),
         "norm": ts.take("mtp.norm.weight", [h])}
    if real:
        blocks = [load_qwen3_next_block(ts, f"mtp.layers.{i}.", cfg, i) for i in range(n_mtp)]
        eps = blocks[0].eps
    else:
        blocks = [load_block(ts, f"mtp.layers.{i}.", cfg, h, input_norm=True, qk_norm=target.qk_norm)
                  for i in range(n_mtp)]
        eps = float(cfg["rms_norm_eps"])
    ts.finish()
    return Head("mtp-qwen3next", cfg, h, eps, blocks, w, vocab, zero_centred=real)


def load_qwen3_next_block(ts, prefix, cfg, i):
    """A Qwen3-Next full-attention decoder layer; its MLP by the config's sparse rule for index i."""
    check_head_features(cfg, ts.where)
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or 256
    rot = int(hd * cfg.get("partial_rotary_factor", 0.25))
    if rot % 2 or not 0 < rot <= hd or nh % nkv:
        raise ValueError(f"{ts.where}: rotary dim {rot} of head_dim {hd} / {nh} heads, {nkv} kv heads invalid")
    inv = ref.rope_inv_freq(rot, float(cfg.get("rope_theta", 10000.0)), cfg.get("rope_scaling"))
    w = {"input_norm": ts.take(prefix + "input_layernorm.weight", [h]),
         "q": ts.take(prefix + "self_attn.q_proj.weight", [2 * nh * hd, h]),
         "k": ts.take(prefix + "self_attn.k_proj.weight", [nkv * hd, h]),
         "v": ts.take(prefix + "self_attn.v_proj.weight", [nkv * hd, h]),
         "o": ts.take(prefix + "self_attn.o_proj.weight", [h, nh * hd]),
         "q_norm": ts.take(prefix + "self_attn.q_norm.weight", [hd]),
         "k_norm": ts.take(prefix + "self_attn.k_norm.weight", [hd]),
         "post_norm": ts.take(prefix + "post_attention_layernorm.weight", [h])}
    n_experts = cfg.get("num_experts", 512)
    step, dense = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or [])
    sparse = i not in dense and n_experts > 0 and (i + 1) % step == 0
    p = prefix + "mlp."
    if sparse:
        for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
            if not cfg.get(key):
                raise ValueError(f"{ts.where}: config needs {key} for the MoE layer {prefix}")
        moe, shared = cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
        w["router"] = ts.take(p + "gate.weight", [n_experts, h])
        for e in range(n_experts):
            w[f"e{e}.gate"] = ts.take(p + f"experts.{e}.gate_proj.weight", [moe, h])
            w[f"e{e}.up"] = ts.take(p + f"experts.{e}.up_proj.weight", [moe, h])
            w[f"e{e}.down"] = ts.take(p + f"experts.{e}.down_proj.weight", [h, moe])
        w["shared.gate"] = ts.take(p + "shared_expert.gate_proj.weight", [shared, h])
        w["shared.up"] = ts.take(p + "shared_expert.up_proj.weight", [shared, h])
        w["shared.down"] = ts.take(p + "shared_expert.down_proj.weight", [h, shared])
        w["shared_gate"] = ts.take(p + "shared_expert_gate.weight", [1, h])
    else:
        inter = cfg["intermediate_size"]
        w["gate"] = ts.take(p + "gate_proj.weight", [inter, h])
        w["up"] = ts.take(p + "up_proj.weight", [inter, h])
        w["down"] = ts.take(p + "down_proj.weight", [h, inter])
    top_k = cfg.get("num_experts_per_tok", 10)
    if sparse and not 0 < top_k <= n_experts:
        raise ValueError(f"{ts.where}: num_experts_per_tok {top_k} of {n_experts} experts")
    return Block(w, nh, nkv, hd, float(cfg.get("rms_norm_eps", 1e-6)), inv, zero_centred=True, attn_gate=True,
                 n_experts=n_experts if sparse else 0, top_k=top_k,
                 norm_topk_prob=bool(cfg.get("norm_topk_prob", True)))


# ----------------------------------------------------------------------------- math


def block_norm(b, x, name):
    """The layer's RMSNorm with weight `name`: scale w, or (1 + w) when zero-centred."""
    w = b.w[name]
    return ref.rms_norm(x, 1.0 + w if b.zero_centred else w, b.eps)


def swiglu(y, gate, up, down):
    return (torch.nn.functional.silu(y @ gate.T) * (y @ up.T)) @ down.T


def block_mlp(b, y):
    """The dense SiLU MLP, or softmax routing to the top_k experts (weights renormalized when
    norm_topk_prob) plus the shared expert scaled by sigmoid(shared_expert_gate)."""
    if not b.n_experts:
        return swiglu(y, b.w["gate"], b.w["up"], b.w["down"])
    probs = torch.softmax(y @ b.w["router"].T, dim=-1)
    weights, chosen = torch.topk(probs, b.top_k)
    if b.norm_topk_prob:
        weights = weights / weights.sum()
    out = torch.zeros_like(y)
    for wt, e in zip(weights.tolist(), chosen.tolist()):
        out = out + wt * swiglu(y, b.w[f"e{e}.gate"], b.w[f"e{e}.up"], b.w[f"e{e}.down"])
    shared = swiglu(y, b.w["shared.gate"], b.w["shared.up"], b.w["shared.down"])
    return out + torch.sigmoid(y @ b.w["shared_gate"].T) * shared


def block_step(b, cache, attn_in, residual, pos):
    """One position through a decoder layer with a KV cache: cache is a list of (pos, k, v)."""
    if b.attn_gate:  # per head [query (head_dim) | gate (head_dim)]
        q, gate = (attn_in @ b.w["q"].T).view(1, b.n_heads, 2 * b.head_dim).split(b.head_dim, dim=-1)
    else:
        q = (attn_in @ b.w["q"].T).view(1, b.n_heads, b.head_dim)
    k = (attn_in @ b.w["k"].T).view(1, b.n_kv_heads, b.head_dim)
    v = (attn_in @ b.w["v"].T).view(b.n_kv_heads, b.head_dim)
    if "q_norm" in b.w:  # per-head RMSNorm, before RoPE
        q = block_norm(b, q, "q_norm")
        k = block_norm(b, k, "k_norm")
    where = torch.tensor([pos])
    q, k = ref.apply_rope(q, where, b.inv_freq)[0], ref.apply_rope(k, where, b.inv_freq)[0]
    assert not cache or cache[-1][0] < pos, "positions must increase"
    cache.append((pos, k, v))
    group = b.n_heads // b.n_kv_heads
    keys = torch.stack([c[1] for c in cache]).repeat_interleave(group, dim=1)  # [T, nh, hd]
    values = torch.stack([c[2] for c in cache]).repeat_interleave(group, dim=1)
    probs = torch.softmax(torch.einsum("hd,thd->ht", q, keys) / math.sqrt(b.head_dim), dim=-1)
    attn = torch.einsum("ht,thd->hd", probs, values).reshape(-1)
    if b.attn_gate:
        attn = attn * torch.sigmoid(gate.reshape(-1))
    x = residual + attn @ b.w["o"].T
    return x + block_mlp(b, block_norm(b, x, "post_norm"))


class TargetFeatures:
    """The target's states for t_0..t_{n-1}, computed once."""

    def __init__(self, target, tokens):
        self.target = target
        _, self.states = ref.forward(target, tokens, hidden_states=True)

    def feature(self, head, p):
        if head.layout == "eagle3":
            return torch.cat([self.states[a][p] for a in head.aux_layers])
        return self.states[-1][p]


def head_step(head, target, caches, layer, pos, token, feature, from_target):
    """Run head layer `layer` at position `pos`; returns (out [H] pre-norm, logits)."""
    b, w, eps = head.blocks[layer], head.w, head.eps
    embed_t = target.weights["model.embed_tokens.weight"]
    cache = caches[layer]
    if head.layout == "eagle":
        x = torch.cat([embed_t[token], feature]) @ w["fc"].T
        if "fc_bias" in w:
            x = x + w["fc_bias"]
        out = block_step(b, cache, x, x, pos)
        return out, out @ target.weights["lm_head.weight"].T
    if head.layout == "eagle3":
        if "embed" in w:  # a head that ships its own embeddings uses them (as vLLM does)
            embed_t = w["embed"]
        g = feature @ w["fc"].T if from_target else feature
        g_normed = ref.rms_norm(g, w["hidden_norm"], eps)
        attn_in = torch.cat([ref.rms_norm(embed_t[token], b.w["input_norm"], eps), g_normed])
        out = block_step(b, cache, attn_in, g_normed if head.norm_before_residual else g, pos)
        return out, ref.rms_norm(out, w["norm"], eps) @ w["lm_head"].T
    if head.layout == "mtp-deepseek":
        i = f"{layer}."
        e = w[i + "embed"][token] * (0.0 if pos == 0 else 1.0)
        x = torch.cat([ref.rms_norm(e, w[i + "enorm"], eps),
                       ref.rms_norm(feature, w[i + "hnorm"], eps)]) @ w[i + "eh_proj"].T
        out = block_step(b, cache, ref.rms_norm(x, b.w["input_norm"], eps), x, pos)
        return out, ref.rms_norm(out, w[i + "head_norm"], eps) @ w[i + "head"].T
    assert head.layout == "mtp-qwen3next"

    def norm(x, name):  # the mtp.* norms: (1 + w) for the real Qwen3-Next module
        return ref.rms_norm(x, 1.0 + w[name] if head.zero_centred else w[name], eps)

    x = torch.cat([norm(embed_t[token], "pre_embed"), norm(feature, "pre_hidden")]) @ w["fc"].T
    out = block_step(b, cache, block_norm(b, x, "input_norm"), x, pos)
    # Qwen3-Next's MTP returns (and so feeds back) its output after mtp.norm, as vLLM does.
    normed = norm(out, "norm")
    return normed, normed @ target.weights["lm_head.weight"].T


def to_target_id(head, draft_id):
    if head.layout in ("eagle3", "dflash"):
        return draft_id + int(head.d2t[draft_id])
    if head.layout == "medusa" and head.token_map is not None:
        return int(head.token_map[draft_id])
    return draft_id


def pick(head, logits, drafts, margins, draft_logits):
    """Append the greedy draft of one logit row (a target id), its top1 - top2 margin and the row."""
    top2 = torch.topk(logits, 2)
    drafts.append(to_target_id(head, int(top2.indices[0])))
    margins.append(float(top2.values[0] - top2.values[1]))
    draft_logits.append(logits)


def run(head, target, tokens, k):
    """Catch up and draft k tokens. Returns dict with drafts (target ids), margins (top1 - top2
    of the draft logits at each step), draft_logits (the k logit rows the drafts were taken
    from; heads only), catch_up_logits [L][n-1][V] (each layer's logits at
    p = 0..n-2; Medusa: [num_heads][n-1][D], each head's; for a draft model [1][n][V], its logits
    at every position of tokens). DFlash has no catch-up: block_logits [k + 1][D] instead."""
    tokens = [int(t) for t in tokens]
    n = len(tokens)
    if head.layout == "draft_model":
        logits = ref.forward(head.draft_model, tokens)
        drafts, margins = ref.greedy(head.draft_model, tokens, k, eos_ids=[])
        return {"drafts": drafts, "margins": margins, "catch_up_logits": [logits]}
    if n < 2:
        raise ValueError("a head needs at least 2 tokens (one catch-up position)")
    if head.layout == "medusa":
        import medusa_ref
        return medusa_ref.run_medusa(head, target, tokens, k)
    if head.layout == "dflash":  # one pass over a block of mask tokens
        import dflash_ref
        return dflash_ref.run_dflash(head, target, tokens, k)
    feats = TargetFeatures(target, tokens)
    caches = [[] for _ in head.blocks]
    catch_up, last_out = [], None
    for layer in range(len(head.blocks)):
        rows = []
        for p in range(n - 1):
            out, logits = head_step(head, target, caches, layer, p, tokens[p + 1], feats.feature(head, p), True)
            rows.append(logits)
            if layer == 0 and p == n - 2:
                last_out = out
        catch_up.append(torch.stack(rows))
    logits = catch_up[0][-1]
    drafts, margins, draft_logits = [], [], []
    outputs = [last_out]  # outputs[i]: the feature drafting step i + 1 consumes
    written = [n - 1] * len(head.blocks)  # per layer: first drafting position it has not computed
    for j in range(k):
        if j > 0:
            layer = j % len(head.blocks)
            for i in range(written[layer] - (n - 2), j + 1):  # gaps first, then position n-2+j
                out, logits = head_step(head, target, caches, layer, n - 2 + i, drafts[i - 1], outputs[i - 1], False)
            written[layer] = n - 1 + j
            last_out = out
            outputs.append(out)
        pick(head, logits, drafts, margins, draft_logits)
    return {"drafts": drafts, "margins": margins, "draft_logits": draft_logits, "catch_up_logits": catch_up}


def draft(head, target, tokens, k):
    """Greedy drafts (target token ids) after `tokens`."""
    return run(head, target, tokens, k)["drafts"]


def catch_up_logits(head, target, tokens, layer=0):
    """Head logits [n-1, V_draft] at catch-up positions p = 0..n-2 (row p predicts the token at
    p + 2; Medusa: of head `layer`, at p + 2 + layer); for a draft model [n, V], its logits at every
    position of `tokens`."""
    return run(head, target, tokens, 1)["catch_up_logits"][layer]


# ----------------------------------------------------------------------------- CLI


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="target model directory")
    ap.add_argument("--head", required=True, help="head / draft model directory")
    ap.add_argument("--method", required=True, choices=METHODS)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids t_0..t_{n-1}")
    ap.add_argument("--k", type=int, default=4, help="number of draft tokens")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target = ref.load_model(args.target)
    head = load_head(args.head, target)
    if head.method != args.method:
        raise SystemExit(f"{args.head} is a {head.layout} head; it needs --method {head.method}")
    tokens = [int(s) for s in args.tokens.split(",") if s.strip()]
    print(json.dumps({"drafts": draft(head, target, tokens, args.k)}))


if __name__ == "__main__":
    main()
