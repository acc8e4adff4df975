"""Trainable Medusa heads for the family's Llama target (PyTorch), and vLLM's Medusa checkpoint I/O.

What it is for
  train_medusa.py trains them with the target frozen (Medusa-1); save_medusa writes the layout of
  models/baton-tiny-code/medusa, the one vLLM's MedusaModel and Baton's MedusaHead load
  (engine/spec/medusa_head.h, docs/engine.md "Medusa"); load_medusa reads it back.
  tools/reference/medusa_ref.py (through draft_heads_ref.py) is the independent float64 forward the
  engine is tested against; this file's math must equal it.

  Head i (0-based) reads h_p, the target's FINAL-NORM output at position p, and predicts the token
  at p + 2 + i (the target itself predicts p + 1):
      x = h_p;  for each layer l:  x = x + SiLU(W_{i,l} x)          (no bias: medusa_fc_bias false)
      logits_i = lm_heads.{i}.weight @ x                               [V'] over the draft vocabulary
  No head reads another head's output, a token or any K/V. The draft vocabulary is EAGLE-3's
  (train_heads.draft_vocabulary): truncated_vocab_size V' < vocab_size, token_map [V'] int64 the
  target id of each logit index (sorted ids).
  Checkpoint: config.json {"architectures": ["MedusaModel"], "model_type": "medusa",
  hidden_size, vocab_size, medusa_num_heads, medusa_num_layers, truncated_vocab_size} and
  model.safetensors with blocks.{i}.layers.{l}.weight [H, H], lm_heads.{i}.weight [V', H] (BF16)
  and token_map [V'] (I64).
  init_from_target() is Medusa's own initialisation: every W zero (SiLU(0) = 0, so x = h_p) and
  every lm head the target's LM-head rows of the draft vocabulary, so before training every head
  predicts the target's next token (restricted to the draft vocabulary).

What it must not do
  Hold or update target weights (init copies rows of the frozen head); write biases, a shared
  `original_lm_head` or a `logit_scale` (the shipped layout has none); change names or shapes of
  the layout above; import the `safetensors` package.
"""

import json
import os

import torch
import torch.nn.functional as F
from torch import nn

from llama import write_json
from safetensors_io import read_safetensors, write_safetensors


class ResidualBlock(nn.Module):
    """vLLM's ResidualBlock without bias: x = x + SiLU(W x) per layer."""

    def __init__(self, hidden, num_layers):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(num_layers))

    def forward(self, x):
        for layer in self.layers:
            x = x + F.silu(layer(x))
        return x


class MedusaHeads(nn.Module):
    def __init__(self, hidden_size, vocab_size, num_heads, num_layers, token_map):
        """token_map: sorted target ids of the draft vocabulary (logit index j -> token_map[j])."""
        super().__init__()
        token_map = torch.as_tensor(token_map, dtype=torch.long)
        self.config = {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": hidden_size,
                       "vocab_size": vocab_size, "medusa_num_heads": num_heads, "medusa_num_layers": num_layers,
                       "truncated_vocab_size": len(token_map)}
        self.blocks = nn.ModuleList(ResidualBlock(hidden_size, num_layers) for _ in range(num_heads))
        self.lm_heads = nn.ModuleList(nn.Linear(hidden_size, len(token_map), bias=False) for _ in range(num_heads))
        self.register_buffer("token_map", token_map, persistent=False)
        in_draft = torch.zeros(vocab_size, dtype=torch.bool)
        in_draft[token_map] = True
        self.register_buffer("in_draft", in_draft, persistent=False)  # target id -> in the draft vocabulary

    @property
    def num_heads(self):
        return len(self.blocks)

    def forward(self, final):
        """final [..., H]: the target's final-norm output -> list of num_heads logits [..., V']."""
        return [lm(block(final)) for block, lm in zip(self.blocks, self.lm_heads)]

    def drafts(self, final):
        """Greedy drafts as target ids, [num_heads, ..., ]: head i's draft for the token at p + 2 + i."""
        return torch.stack([self.token_map[logits.argmax(-1)] for logits in self(final)])


def init_from_target(medusa, target):
    """Medusa's init: residual weights zero, lm heads = the target's LM-head rows of token_map."""
    with torch.no_grad():
        for block in medusa.blocks:
            for layer in block.layers:
                layer.weight.zero_()
        rows = target.head_weight().detach()[medusa.token_map.to(target.head_weight().device)]
        for lm in medusa.lm_heads:
            lm.weight.copy_(rows.to(lm.weight.device))


def save_medusa(medusa, directory, dtype=torch.bfloat16):
    os.makedirs(directory, exist_ok=True)
    tensors = {k: v.detach().cpu().to(dtype) for k, v in medusa.state_dict().items()}
    tensors["token_map"] = medusa.token_map.detach().cpu().to(torch.int64)
    write_json(os.path.join(directory, "config.json"), medusa.config)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)


def load_medusa(directory):
    """A float32 MedusaHeads from a directory save_medusa wrote (weights upcast)."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    stored = read_safetensors(os.path.join(directory, "model.safetensors"))
    medusa = MedusaHeads(cfg["hidden_size"], cfg["vocab_size"], cfg["medusa_num_heads"], cfg["medusa_num_layers"],
                         stored.pop("token_map"))
    medusa.load_state_dict({k: v.float() for k, v in stored.items()})
    return medusa.eval()
