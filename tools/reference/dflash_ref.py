"""Float64 reference for the DFlash speculative drafter (vLLM's / z-lab's "method": "dflash").

What it is for
  Ground truth for Baton's DFlash tests: tools/fixtures/make_spec_fixtures.py writes its drafts into
  spec/reference.json. draft_heads_ref.py dispatches here (detect_layout -> "dflash", build_head ->
  load_dflash, run -> run_dflash), so its CLI answers for a DFlash head too:

    /usr/bin/python3 tools/reference/draft_heads_ref.py --target DIR --head DIR \
        --method dflash --tokens 1,2,3 --k 4                       # -> {"drafts": [...]}

  Checkpoint layout (config architectures ["DFlashDraftModel"], or a dflash_config key):
    config      hidden_size, vocab_size (the target's), num_hidden_layers (draft layers), heads,
                num_key_value_heads, head_dim, intermediate_size, rms_norm_eps, rope_theta
                (+ rope_scaling), hidden_act silu, attention_bias (q/k/v/o biases; default
                false), num_target_layers (if given, the target's layer count), dflash_config
                {mask_token_id, target_layer_ids, block_size, causal}; older checkpoints give
                block_size (and is_causal) at the top level instead; optional layer_types
                (full_attention / sliding_attention per draft layer) with sliding_window;
                optional draft_vocab_size with lm_head.weight + d2t.
    tensors     layers.{i}.{input_layernorm, post_attention_layernorm}.weight,
                layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.self_attn.{q,k}_norm.weight,
                layers.{i}.mlp.{gate,up,down}_proj.weight (+ layers.{i}.self_attn.{q,k,v,o}_proj
                .bias with attention_bias), fc.weight [H, len(ids) H],
                hidden_norm.weight, norm.weight; optional lm_head.weight [D, H] (else the
                target's), embed_tokens.weight [V, H] (else the target's), d2t I64 [D].

Semantics (the contract Baton implements). Tokens t_0..t_{n-1}, k drafts, k + 1 <= block_size.
  1. F [n-1, len(ids) H]: per context position p = 0..n-2 the concatenation, over id in
     target_layer_ids in the listed order, of the target's residual stream entering layer id + 1
     (= layer id's output), or for id = L_t - 1 the target's final-norm output (HF's
     output_hidden_states[id + 1] in both cases).
  2. cn = RMSNorm(F @ fc^T, hidden_norm).
  3. Per draft layer: context keys k_norm(k_proj(cn)) per head, RoPE at p; values v_proj(cn); no
     input_layernorm on the context (k_proj / v_proj include their biases when the head has them).
  4. The query block: tokens [t_{n-1}, m, ..., m] (k copies of m = mask_token_id) at positions
     n-1 .. n-1+k; x = their embeddings (the head's embed_tokens if shipped, else the target's).
  5. Each draft layer is a Qwen3 pre-norm layer on x: input_layernorm, q/k/v, per-head q/k
     RMSNorm, RoPE (rotate-half, the head's rope_theta), attention of the block's queries over
     [context keys; block keys] (GQA, scale 1/sqrt(head_dim)), o_proj, residual, SiLU MLP on
     post_attention_layernorm, residual. Visibility of key position pk to the query at position
     pq (context keys at 0..n-2, block keys at n-1..n-1+k): a non-causal layer sees every key, a
     causal one pk <= pq; a sliding-window layer (layer_types "sliding_attention") also needs
     pq - pk < sliding_window, and when non-causal pk - pq < sliding_window too. Which layers are
     causal: all or none when is_causal (top level) or dflash_config.causal says so, else the
     sliding-window layers (z-lab's DFlashDraftModel).
  6. logits = RMSNorm(x, norm) @ lm_head^T; drafts[i] = argmax of block row i + 1 (i < k), mapped
     to a target id d + d2t[d] when the head has d2t.
  The drafter runs once per step: no KV cache of its own, no feedback, no catch-up logits.

What it must not do
  Import `transformers`/`safetensors` or copy their code; guess: unknown keys' meanings, tensors it
  does not consume, target layer ids outside the target, shape or vocab mismatches are errors.
  Speed is not a goal.
"""

import math
from dataclasses import dataclass

import torch

import draft_heads_ref as dh
import transformer_ref as ref


@dataclass
class DFlashHead(dh.Head):
    mask_token_id: int = 0
    block_size: int = 0
    causal: bool = None  # every layer's causality when the config states it; None: by layer type
    layer_types: list = None  # per draft layer, "full_attention" or "sliding_attention"
    sliding_window: int = None  # of the sliding_attention layers; None: no window anywhere

    def layer_causal(self, i):
        return self.causal if self.causal is not None else self.layer_types[i] == "sliding_attention"

    def layer_window(self, i):
        return self.sliding_window if self.layer_types[i] == "sliding_attention" else None


# ----------------------------------------------------------------------------- loading


def one_setting(where, values, what):
    """The value given by any of `values` (None = not given); several that disagree are an error."""
    given = [v for v in values if v is not None]
    if len({repr(v) for v in given}) > 1:
        raise ValueError(f"{where}: {what} is given twice with different values {given}")
    return given[0] if given else None


def load_dflash(ts, cfg, target, vocab):
    """A DFlashHead from the Tensors `ts` and the config dict; `target` is the transformer_ref.Model."""
    where, dc = ts.where, cfg.get("dflash_config")
    if not isinstance(dc, dict):
        raise ValueError(f"{where}: a DFlash head needs a dflash_config object")
    h, n_layers = cfg["hidden_size"], cfg.get("num_hidden_layers")
    if h != target.hidden or cfg.get("vocab_size", vocab) != vocab:
        raise ValueError(f"{where}: hidden_size / vocab_size {h} / {cfg.get('vocab_size')} != the target's "
                         f"{target.hidden} / {vocab}")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"{where}: num_hidden_layers {n_layers!r} must be >= 1")
    if cfg.get("tie_word_embeddings"):
        raise ValueError(f"{where}: tie_word_embeddings=true is not supported for a DFlash head")
    n_target = cfg.get("num_target_layers")
    if n_target is not None and n_target != target.n_layers:
        raise ValueError(f"{where}: num_target_layers {n_target} != the target's {target.n_layers} layers")
    ids = dc.get("target_layer_ids")
    if not (isinstance(ids, list) and ids and all(isinstance(i, int) and 0 <= i < target.n_layers for i in ids)):
        raise ValueError(f"{where}: target_layer_ids {ids!r} invalid for a target of {target.n_layers} layers")
    mask = dc.get("mask_token_id")
    if not (isinstance(mask, int) and 0 <= mask < vocab):
        raise ValueError(f"{where}: mask_token_id {mask!r} must be a token id < vocab_size {vocab}")
    block_size = one_setting(where, [dc.get("block_size"), cfg.get("block_size")], "block_size")
    if not (isinstance(block_size, int) and block_size >= 2):
        raise ValueError(f"{where}: block_size {block_size!r} (dflash_config or top level) must be >= 2")
    causal = one_setting(where, [dc.get("causal"), cfg.get("is_causal")], "causal (dflash_config.causal / "
                         "is_causal)")
    if causal is not None and not isinstance(causal, bool):
        raise ValueError(f"{where}: causal {causal!r} must be a boolean")
    types = cfg.get("layer_types") or ["full_attention"] * n_layers
    if not (isinstance(types, list) and len(types) == n_layers
            and all(t in ("full_attention", "sliding_attention") for t in types)):
        raise ValueError(f"{where}: layer_types {types!r} must give full_attention or sliding_attention for each of "
                         f"the {n_layers} layers")
    window = cfg.get("sliding_window") if "sliding_attention" in types else None
    if "sliding_attention" in types and not (isinstance(window, int) and window >= 1):
        raise ValueError(f"{where}: sliding_attention layers need a sliding_window >= 1, got {window!r}")
    biases = cfg.get("attention_bias", False)
    if not isinstance(biases, bool):
        raise ValueError(f"{where}: attention_bias {biases!r} must be a boolean")
    d = cfg.get("draft_vocab_size") or vocab
    w = {"fc": ts.take("fc.weight", [h, len(ids) * h]),
         "hidden_norm": ts.take("hidden_norm.weight", [h]),
         "norm": ts.take("norm.weight", [h])}
    if "lm_head.weight" in ts.stored:
        w["lm_head"] = ts.take("lm_head.weight", [d, h])
    elif d != vocab:
        raise ValueError(f"{where}: draft_vocab_size {d} != vocab_size {vocab} needs lm_head.weight")
    if "embed_tokens.weight" in ts.stored:
        w["embed"] = ts.take("embed_tokens.weight", [vocab, h])
    if "d2t" in ts.stored or d != vocab:
        d2t = ts.take("d2t", [d], raw=True)
        if d2t.dtype != torch.int64:
            raise ValueError(f"{where}: d2t must be I64, got {d2t.dtype}")
        mapped = torch.arange(d) + d2t
        if int(mapped.min()) < 0 or int(mapped.max()) >= vocab:
            raise ValueError(f"{where}: d2t maps outside the target vocab")
    else:
        d2t = torch.zeros(d, dtype=torch.int64)
    blocks = [dh.load_block(ts, f"layers.{i}.", cfg, h, input_norm=True, qk_norm=True, attention_bias=biases)
              for i in range(n_layers)]
    ts.finish()
    return DFlashHead("dflash", cfg, h, blocks[0].eps, blocks, w, d, aux_layers=list(ids), d2t=d2t,
                      mask_token_id=mask, block_size=block_size, causal=causal, layer_types=types,
                      sliding_window=window)


# ----------------------------------------------------------------------------- math


def context_features(head, target, tokens):
    """F [n-1, len(ids) H]: the target states at positions 0..n-2. transformer_ref's states[j] is the
    input of layer j (j < L_t) and states[L_t] the final-norm output, so HF's hidden_states[id + 1]
    is states[id + 1] for every id."""
    _, states = ref.forward(target, tokens, hidden_states=True)
    return torch.cat([states[i + 1][:len(tokens) - 1] for i in head.aux_layers], dim=-1)


def project(b, x, proj):
    """x [T, in] @ projection `proj`^T, plus its bias when the layer has one."""
    y = x @ b.w[proj].T
    return y + b.w[proj + "_bias"] if proj + "_bias" in b.w else y


def heads_of(b, x, proj, n):
    """x [T, in] through projection `proj`, split into n heads: [T, n, head_dim]."""
    return project(b, x, proj).view(x.shape[0], n, b.head_dim)


def visible(pq, pk, causal, window):
    """Whether the query at position pq sees the key at pk (the rule in the module docstring)."""
    if causal and pk > pq:
        return False
    return window is None or (pq - pk < window and (causal or pk - pq < window))


def dflash_layer(b, cn, x, ctx_pos, blk_pos, causal, window=None):
    """One draft layer on the block x [B, H] with the context cn [T, H] (already normed by
    hidden_norm); returns the new x. Per query row i the visible keys are picked explicitly."""
    k_ctx = ref.apply_rope(dh.block_norm(b, heads_of(b, cn, "k", b.n_kv_heads), "k_norm"), ctx_pos, b.inv_freq)
    v_ctx = heads_of(b, cn, "v", b.n_kv_heads)
    hn = dh.block_norm(b, x, "input_norm")
    q = ref.apply_rope(dh.block_norm(b, heads_of(b, hn, "q", b.n_heads), "q_norm"), blk_pos, b.inv_freq)
    k_blk = ref.apply_rope(dh.block_norm(b, heads_of(b, hn, "k", b.n_kv_heads), "k_norm"), blk_pos, b.inv_freq)
    v_blk = heads_of(b, hn, "v", b.n_kv_heads)
    group = b.n_heads // b.n_kv_heads
    key_pos = torch.cat([ctx_pos, blk_pos]).tolist()
    all_keys = torch.cat([k_ctx, k_blk]).repeat_interleave(group, dim=1)  # [T + B, nh, hd]
    all_values = torch.cat([v_ctx, v_blk]).repeat_interleave(group, dim=1)
    rows = []
    for i in range(x.shape[0]):
        seen = [j for j, pk in enumerate(key_pos) if visible(int(blk_pos[i]), pk, causal, window)]
        keys, values = all_keys[seen], all_values[seen]
        probs = torch.softmax(torch.einsum("hd,thd->ht", q[i], keys) / math.sqrt(b.head_dim), dim=-1)
        rows.append(torch.einsum("ht,thd->hd", probs, values).reshape(-1))
    x = x + project(b, torch.stack(rows), "o")
    return x + dh.block_mlp(b, dh.block_norm(b, x, "post_norm"))


def block_logits(head, target, tokens, k):
    """Logits [k + 1, D] of the query block [t_{n-1}, mask * k] at positions n-1 .. n-1+k."""
    n = len(tokens)
    if n < 2:
        raise ValueError("DFlash needs at least 2 tokens (one context position)")
    if not 0 < k < head.block_size:
        raise ValueError(f"a DFlash head with block_size {head.block_size} drafts 1..{head.block_size - 1} "
                         f"tokens, not {k}")
    cn = ref.rms_norm(context_features(head, target, tokens) @ head.w["fc"].T, head.w["hidden_norm"], head.eps)
    embed = head.w.get("embed", target.weights["model.embed_tokens.weight"])
    x = embed[torch.tensor([tokens[-1]] + [head.mask_token_id] * k)]
    ctx_pos, blk_pos = torch.arange(n - 1), torch.arange(n - 1, n + k)
    for i, b in enumerate(head.blocks):
        x = dflash_layer(b, cn, x, ctx_pos, blk_pos, head.layer_causal(i), head.layer_window(i))
    return ref.rms_norm(x, head.w["norm"], head.eps) @ head.w.get("lm_head", target.weights["lm_head.weight"]).T


def run_dflash(head, target, tokens, k):
    """Drafts k tokens in one pass. Returns dict with drafts (target ids), margins (top1 - top2 of
    block rows 1..k), draft_logits (those k rows) and block_logits [k + 1, D] (every block row)."""
    logits = block_logits(head, target, [int(t) for t in tokens], k)
    drafts, margins, draft_logits = [], [], []
    for row in logits[1:]:
        dh.pick(head, row, drafts, margins, draft_logits)
    return {"drafts": drafts, "margins": margins, "draft_logits": draft_logits, "block_logits": logits}
