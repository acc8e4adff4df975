"""Write the family's model card (models/baton-tiny-code/README.md) from what was measured.

What it is for
  After tools/train/build_family.sh, the card is made from three files, none typed by hand:
      bench/run_spec_bench.sh family "" --num-prompts 164 --max-tokens 128 > build/family/spec_bench.jsonl
      build/release/cli/baton generate --model models/baton-tiny-code/target \\
          --prompt 'def fibonacci(n):' --max-tokens 96 --json > build/family/sample.json
      /usr/bin/python3 tools/train/model_card.py --family models/baton-tiny-code \\
          --spec-bench build/family/spec_bench.jsonl --sample build/family/sample.json
  It reads FAMILY/training_log.json (data, steps, losses, stage timings), the tensors of every
  member (parameter counts, dtypes, bytes) and the two measurement files.

What it must not do
  Invent a number: every figure comes from the files above; a missing one is an error.
"""

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from safetensors_io import read_safetensors  # noqa: E402

MEMBERS = ("target", "draft", "eagle3", "mtp")
METHOD_MEMBER = {"draft_model": "draft", "eagle3": "eagle3", "mtp": "mtp"}


def member_facts(family, name):
    d = os.path.join(family, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    params = sum(t.numel() for t in tensors.values() if t.is_floating_point())
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    return {"config": cfg, "parameters": params, "bytes": size, "tensors": len(tensors)}


def find(log, key, **match):
    """The last record holding `key` whose fields equal `match`."""
    rows = [r for r in log if key in r and all(r.get(k) == v for k, v in match.items())]
    if not rows:
        raise SystemExit(f"training_log.json has no record with {key} and {match}")
    return rows[-1]


def fmt_params(n):
    return f"{n / 1e6:.2f}M"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True)
    ap.add_argument("--spec-bench", required=True, help="JSONL of bench/run_spec_bench.sh family")
    ap.add_argument("--sample", required=True, help="`baton generate --json` output for the example")
    a = ap.parse_args(argv)
    with open(os.path.join(a.family, "training_log.json")) as f:
        tl = json.load(f)
    log, cfg = tl["log"], tl["config"]
    facts = {m: member_facts(a.family, m) for m in MEMBERS}
    with open(a.spec_bench) as f:
        bench = [json.loads(line) for line in f if line.strip()]
    with open(a.sample) as f:
        sample = json.load(f)

    corpus = find(log, "packages", stage="corpus")
    tok = find(log, "vocab_size", stage="tokenizer")
    t_final = find(log, "train_tokens", model="target", final=True)
    d_final = find(log, "train_tokens", model="draft-pretrain", final=True)
    h_final = find(log, "valid_agree", model="heads", final=True)
    t_ship = find(log, "shipped_bf16_valid_loss", model="target")
    d_ship = find(log, "shipped_bf16_valid_loss", model="draft")
    vocab = find(log, "draft_vocab_coverage", stage="heads")
    stages = [r for r in log if "wall_s" in r and "stage" in r]
    total_wall = sum(r["wall_s"] for r in stages)
    total_cpu = sum(r["cpu_s"] for r in stages)
    tc, dc, ec = facts["target"]["config"], facts["draft"]["config"], facts["eagle3"]["config"]
    total_bytes = sum(f["bytes"] for f in facts.values())
    tokens_per_step = cfg["batch"] * cfg["seq_len"]

    out = []
    w = out.append
    w("# baton-tiny-code\n")
    w("A tiny code-completion model family trained by Baton's own scripts (`tools/train/`) on the Python")
    w("standard library, so that Baton's main job and its speculative decoding run on real, trained")
    w("weights without any download. It writes Python-looking code; it is far too small to be useful")
    w("for anything but demonstrating and testing a serving system. Rebuild it with")
    w("`tools/train/build_family.sh` (see [`../README.md`](../README.md)).\n")
    w("| member | architecture | parameters | dtype | what |")
    w("|---|---|---|---|---|")
    w(f"| `target/` | `{tc['architectures'][0]}` | {fmt_params(facts['target']['parameters'])} | "
      f"{tc['torch_dtype']} | {tc['num_hidden_layers']} layers, hidden {tc['hidden_size']}, "
      f"{tc['num_attention_heads']} heads / {tc['num_key_value_heads']} KV heads, MLP {tc['intermediate_size']}, "
      f"tied embeddings, vocab {tc['vocab_size']} |")
    w(f"| `draft/` | `{dc['architectures'][0]}` | {fmt_params(facts['draft']['parameters'])} "
      f"({facts['draft']['parameters'] / facts['target']['parameters']:.2f} of the target) | {dc['torch_dtype']} | "
      f"{dc['num_hidden_layers']} layers, hidden {dc['hidden_size']}; same tokenizer; pre-trained on the data, "
      f"then distilled from the target's logits |")
    w(f"| `eagle3/` | `{ec['architectures'][0]}` | {fmt_params(facts['eagle3']['parameters'])} | "
      f"{ec['torch_dtype']} | one decoder layer over [embedding, fc(aux hidden states of target layers "
      f"{ec['eagle_aux_hidden_state_layer_ids']})], draft vocabulary {ec['draft_vocab_size']} "
      f"(`d2t`/`t2d`; covers {vocab['draft_vocab_coverage']:.1%} of training tokens) |")
    mc = facts["mtp"]["config"]
    w(f"| `mtp/` | DeepSeek-V3 MTP (`model.layers.{mc['num_hidden_layers']}.*`, `num_nextn_predict_layers: 1`) | "
      f"{fmt_params(facts['mtp']['parameters'])} (incl. its copies of the target's embedding and head) | "
      f"{mc['torch_dtype']} | `enorm`, `hnorm`, `eh_proj`, a decoder layer, `shared_head` |")
    w(f"\nTotal size on disk: {total_bytes / 1e6:.1f} MB.\n")

    w("## Data\n")
    pk = ", ".join(f"`{k}` {v}" for k, v in corpus["packages"].items())
    sp = corpus["splits"]
    w(f"The `.py` files of Debian 12's Python 3.11 standard library (`/usr/lib/python3.11`; packages {pk}),")
    w("minus tests, site/dist-packages and generated files (codec tables, Sphinx dumps), in sorted path order;")
    w("a file goes to validation iff a hash of its path says so (5%). "
      f"Train: {sp['train']['num_files']} files, {sp['train']['bytes'] / 1e6:.1f} MB, "
      f"{tok['tokens']['train']:,} tokens; validation: {sp['valid']['num_files']} files, "
      f"{tok['tokens']['valid']:,} tokens. The file list and hashes are in `corpus_manifest.json`.\n")
    w(f"Tokenizer: byte-level BPE trained on the train split (Llama-3's pre-tokenizer regex: letters with one "
      f"leading non-letter, digit runs of 1-3, except that punctuation does not take the newlines after it, so a "
      f"prompt ending in `:` ends on a token boundary seen in training; then GPT-2's byte map), vocabulary {tok['vocab_size']} "
      f"(256 bytes + {tok['merges']} merges + `<|endoftext|>`, which is BOS, EOS and the document separator). "
      "At hidden size 256 the tied embedding is then 1/7 of the target while every token still occurs hundreds "
      "of times in the corpus; Hugging Face `tokenizers` loads the files and encodes exactly as Baton does "
      "(tests/tokenizer, and tools/train/check_tokenizer.py on the whole validation split).\n")

    w("## Training\n")
    w(f"Debian's python3-torch on the CPU, seed {cfg['seed']}, bf16 autocast with float32 weights; AdamW "
      f"(0.9, 0.95, wd 0.1), warm-up {cfg['warmup']} steps then cosine to 10%; batches of {cfg['batch']} x "
      f"{cfg['seq_len']} tokens ({tokens_per_step} per step).\n")
    w("| stage | steps | tokens seen | peak lr | validation loss (nats/token) | perplexity |")
    w("|---|---|---|---|---|---|")
    w(f"| target | {cfg['target_steps']} | {t_final['train_tokens']:,} | {cfg['target_lr']} | "
      f"{t_ship['shipped_bf16_valid_loss']:.3f} (BF16 as shipped) | {math.exp(t_ship['shipped_bf16_valid_loss']):.1f} |")
    w(f"| draft, pre-training | {cfg['draft_steps']} | {d_final['train_tokens']:,} | {cfg['draft_lr']} | "
      f"{d_final['valid_loss']:.3f} | {d_final['valid_ppl']:.1f} |")
    w(f"| draft, distilled (with the heads) | {cfg['heads_steps']} | | {cfg['distill_lr']} | "
      f"{d_ship['shipped_bf16_valid_loss']:.3f} (data loss, BF16) | {math.exp(d_ship['shipped_bf16_valid_loss']):.1f} |")
    agree = h_final["valid_agree"]
    w(f"| EAGLE-3 + MTP, target frozen | {cfg['heads_steps']} | | {cfg['heads_lr']} | "
      f"soft-label CE vs the target: EAGLE-3 {h_final['valid_loss']['eagle3']:.2f}, MTP "
      f"{h_final['valid_loss']['mtp']:.2f} (sums over {cfg['ttt_steps']} weighted drafting steps) | |")
    w("\nThe heads are trained as they draft: unrolled over "
      f"{cfg['ttt_steps']} steps, each step reading the previous step's output (training-time test), "
      "against the target's own next-token distribution, never the data's. Top-1 agreement with the "
      "target's greedy token on the validation split, per drafting step: "
      f"draft model {agree['draft'][0]:.2f}; EAGLE-3 {', '.join(f'{x:.2f}' for x in agree['eagle3'])}; "
      f"MTP {', '.join(f'{x:.2f}' for x in agree['mtp'])}.\n")
    w(f"Stage times (this 2-core machine): " + ", ".join(f"{r['stage']} {r['wall_s'] / 60:.1f} min" for r in stages)
      + f"; total {total_wall / 60:.1f} min wall, {total_cpu / 60:.1f} CPU-minutes.\n")

    w("## Acceptance (Baton's engine)\n")
    w("`bench/run_spec_bench.sh family` on the HumanEval prompts (`bench/data/HumanEval.jsonl.gz`), "
      f"greedy, batch 1, k = {bench[0]['speculative_config'].get('num_speculative_tokens')}, "
      f"{bench[0]['prompts']} prompts, up to {bench[0]['max_tokens']} generated tokens each. Mean acceptance length = "
      "1 + accepted / drafts (tokens emitted per verification step); the TPOT ratio is speculative / plain, "
      "paired per prompt in one run (median; below 1 is faster). "
      + ("Output was token-identical to plain greedy decoding for every prompt and method.\n"
         if all(b["greedy_mismatches"] == 0 for b in bench) else
         "**Some outputs differed from plain greedy decoding (see the last column): a bug.**\n"))
    w("| method | mean acceptance length | acceptance rate | per position (1..k) | TPOT ratio | greedy mismatches |")
    w("|---|---|---|---|---|---|")
    for b in bench:
        method = b["speculative_config"]["method"]
        pos = ", ".join(f"{x:.2f}" for x in b["acceptance_per_position"])
        w(f"| {method} | {b['mean_acceptance_length']:.2f} | {b['acceptance_rate']:.2f} | {pos} | "
          f"{b['tpot_ratio_median']:.2f} | {b['greedy_mismatches']} |")
    w("\nTPOT ratios above 1 are expected at this size for the model-based proposers: a 7M-parameter target "
      "step is mostly fixed per-step overhead, so a proposer forward costs almost as much as the target's and "
      "k = 4 drafting steps can outweigh what verification saves; the CPU proposers (ngram, suffix) cost nearly "
      "nothing. Acceptance is the figure that carries over to real models, where a target step is far dearer "
      "than a draft step.\n")

    w("## Example\n")
    w("`baton generate --model models/baton-tiny-code/target --prompt 'def fibonacci(n):'` (greedy):\n")
    w("```python")
    w("def fibonacci(n):" + sample["text"])
    w("```\n")
    with open(os.path.join(a.family, "README.md"), "w") as f:
        f.write("\n".join(out))
    print(f"wrote {os.path.join(a.family, 'README.md')}")


if __name__ == "__main__":
    main()
