"""Write the family's model card (models/baton-tiny-code/README.md) from what was measured.

What it is for
  After tools/train/build_family.sh, the card is made from these files, none typed by hand:
      bench/run_spec_bench.sh family "" --num-prompts 164 --max-tokens 128 > build/family/spec_bench.jsonl
      build/release/cli/baton generate --model models/baton-tiny-code/target \\
          --prompt 'def fibonacci(n):' --max-tokens 96 --json > build/family/sample.json
      build/release/cli/baton generate --model models/baton-tiny-code/target --max-tokens 160 --json \\
          --chat '[{"role":"user","content":"Return the n-th Fibonacci number."}]' \\
          > build/family/chat_sample.json
      /usr/bin/python3 tools/train/chat_acceptance.py --out build/family/chat_acceptance.json
      /usr/bin/python3 tools/train/model_card.py --family models/baton-tiny-code \\
          --spec-bench build/family/spec_bench.jsonl --sample build/family/sample.json \\
          --chat-sample build/family/chat_sample.json --chat-acceptance build/family/chat_acceptance.json
  It reads FAMILY/training_log.json (data, steps, losses, stage timings), the tensors of every
  member (parameter counts, dtypes, bytes), target/tokenizer_config.json (the chat template) and
  the measurement files (the two chat ones when the log has a chat stage).

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

MEMBERS = ("target", "draft", "eagle3", "mtp", "medusa", "dflash")


def member_facts(family, name):
    d = os.path.join(family, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    params = sum(t.numel() for t in tensors.values() if t.is_floating_point())
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors.values() if t.is_floating_point()})
    return {"config": cfg, "parameters": params, "bytes": size, "tensors": len(tensors), "dtype": "/".join(dtypes)}


def find(log, key, **match):
    """The last record holding `key` whose fields equal `match`."""
    rows = [r for r in log if key in r and all(r.get(k) == v for k, v in match.items())]
    if not rows:
        raise SystemExit(f"training_log.json has no record with {key} and {match}")
    return rows[-1]


def mismatches(b):
    """spec_bench's count of requests whose tokens differ from plain decoding (named token_mismatches
    since it also covers seeded sampling; greedy_mismatches before)."""
    return b["token_mismatches"] if "token_mismatches" in b else b["greedy_mismatches"]


def fmt_params(n):
    return f"{n / 1e6:.2f}M"


def write_chat(w, a, log, cfg, rec):
    """The card's chat section: template, data, tune, results, acceptance on chats, an example."""
    with open(os.path.join(a.family, "target", "tokenizer_config.json")) as f:
        template = json.load(f)["chat_template"]
    with open(a.chat_sample) as f:
        sample = json.load(f)
    with open(a.chat_acceptance) as f:
        acc = json.load(f)
    ship = find(log, "chat_valid_loss", model="target-chat")
    final = find(log, "chat_train_answer_tokens", model="chat", final=True)
    wall = [r for r in log if r.get("stage") == "chat" and "wall_s" in r][-1]
    w("## Chat\n")
    w("The target is tuned for chat after its pre-training (stage `chat`: `tools/train/chat_data.py`, "
      "`tools/train/train_chat.py`), so `baton generate --chat` and `/v1/chat/completions` work on it. "
      "Its `tokenizer_config.json` holds the chat template. No token was added (the vocabulary stays "
      f"{find(log, 'vocab_size', stage='tokenizer')['vocab_size']}, so the draft model, the EAGLE-3 head with its "
      "`d2t` map and the MTP layer with its copy of the embedding stay valid): a conversation renders as\n")
    w("```")
    w("<|endoftext|># system\nYou write Python code.\n# user\nReturn the n-th Fibonacci number.\n# assistant\n"
      "def fibonacci(n):\n    ...\n<|endoftext|># user\n...")
    w("```\n")
    w("Each message is `# ROLE`, a newline, its content (trimmed) and a newline; every assistant turn ends with "
      "`<|endoftext|>` (the EOS: generation stops where a turn ends, as a file ends in the corpus); "
      "`add_generation_prompt` appends `# assistant` and a newline; roles other than `system`, `user` and "
      "`assistant` are refused. Baton's Jinja renderer and `@huggingface/jinja` render it identically "
      "(`tools/train/test_chat.py`). The template:\n")
    w("```jinja")
    w(template)
    w("```\n")
    w("Data: docstring → function pairs from the corpus, found with Python's `ast`: every top-level function "
      "whose docstring's first paragraph has at least 3 words. The user turn is that paragraph on one line, "
      "worded one of three ways picked by a hash of file and name (as written; \"Write a function that returns "
      "...\" when it starts with a known imperative verb; \"Write a Python function `name`. ...\"); the "
      "assistant turn is the function's source exactly as in the file, decorators and docstring included: the "
      "code the target and its heads were trained on, so the tune teaches the turn format and when to stop "
      "rather than a new style of code. Methods are left out (their source depends on their class), as are "
      f"pairs longer than a {cfg['seq_len']}-token window (train {rec['dropped']['train']['too long']}, validation "
      f"{rec['dropped']['valid']['too long']}) and duplicates ({rec['dropped']['train']['duplicate']}). "
      f"Train: {rec['pairs']['train']:,} pairs from the train split; validation: {rec['pairs']['valid']} pairs "
      "from the validation files only.\n")
    w(f"Tune: from the pre-trained target as shipped before (BF16), {cfg['chat_steps']} steps of "
      f"{cfg['chat_lm_rows']} ordinary corpus windows + {cfg['chat_rows']} windows of packed conversations (20% "
      "with a system message, 25% of two turns); loss = the windows' LM loss + the conversations' loss on the "
      "assistant tokens only (each answer and its closing newline and `<|endoftext|>`). The tied embedding / LM "
      "head is frozen, so the MTP layer's copies of it stay exact (checked bit for bit); AdamW without weight "
      f"decay, peak lr {cfg['chat_lr']} after {cfg['chat_warmup']} warm-up steps, cosine to 10%, seed "
      f"{cfg['seed'] + 4}; {final['chat_train_answer_tokens']:,} answer tokens seen; {wall['wall_s'] / 60:.1f} min"
      + (f" on {wall['threads']} thread{'s' * (wall['threads'] > 1)}" if "threads" in wall else "") + ".\n")
    w("| on the validation split | before the tune | after (BF16 as shipped) |")
    w("|---|---|---|")
    w(f"| LM loss, all validation windows (nats/token) | {rec['valid_loss_before']:.3f} | "
      f"{ship['shipped_bf16_valid_loss']:.3f} ({ship['valid_loss_change']:+.1%}) |")
    w(f"| loss on the answers of the {rec['pairs']['valid']} pairs | {rec['chat_valid_loss_before']:.3f} | "
      f"{ship['chat_valid_loss']:.3f} |")
    w(f"| answers whose closing `<|endoftext|>` is the argmax (teacher-forced) | "
      f"{rec['chat_valid_stop_before']:.2f} | {ship['chat_valid_stop']:.2f} |")
    m = acc["methods"]
    w(f"\nAcceptance on these chats (`tools/train/chat_acceptance.py`: the {acc['prompts']} validation requests "
      f"rendered with the template, greedy, k = {acc['num_speculative_tokens']}, at most {acc['max_tokens']} "
      f"tokens, stopping at `<|endoftext|>`; {m['plain']['stopped']} of {acc['prompts']} stopped, "
      f"{m['plain']['generated_tokens']:,} tokens in all):\n")
    w("| method | mean acceptance length | acceptance rate | greedy mismatches |")
    w("|---|---|---|---|")
    for name, r in m.items():
        if name != "plain":
            w(f"| {name} | {r['mean_acceptance_length']:.2f} | {r['acceptance_rate']:.2f} | {r['greedy_mismatches']} |")
    w("")
    w("`baton generate --model models/baton-tiny-code/target --chat '[{\"role\":\"user\",\"content\":"
      "\"Return the n-th Fibonacci number.\"}]'` (greedy; the assistant turn, finish: "
      f"{sample['finish_reason']}). Expect the shape of an answer (one function, then the end of the turn) rather "
      "than a correct one:\n")
    w("```python")
    w(sample["text"].rstrip("\n"))
    w("```\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True)
    ap.add_argument("--spec-bench", required=True, help="JSONL of bench/run_spec_bench.sh family")
    ap.add_argument("--sample", required=True, help="`baton generate --json` output for the example")
    ap.add_argument("--chat-sample", help="`baton generate --chat ... --json` output for the chat example")
    ap.add_argument("--chat-acceptance", help="tools/train/chat_acceptance.py --out")
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
    chat = [r for r in log if r.get("stage") == "chat" and "pairs" in r]
    if chat and not (a.chat_sample and a.chat_acceptance):
        raise SystemExit("the log has a chat stage: pass --chat-sample and --chat-acceptance")
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
    uc = facts["medusa"]["config"]
    w(f"| `medusa/` | `{uc['architectures'][0]}` (Medusa-1) | {fmt_params(facts['medusa']['parameters'])} | "
      f"{facts['medusa']['dtype']} | {uc['medusa_num_heads']} heads of {uc['medusa_num_layers']} residual block"
      f"{'s' * (uc['medusa_num_layers'] > 1)} each over the target's last hidden state, each with its own LM head "
      f"over a truncated vocabulary of {uc['truncated_vocab_size']} |")
    fc = facts["dflash"]["config"]
    fd = fc["dflash_config"]
    w(f"| `dflash/` | `{fc['architectures'][0]}` (block diffusion) | {fmt_params(facts['dflash']['parameters'])} | "
      f"{fc['torch_dtype']} | {fc['num_hidden_layers']} Qwen3 layer{'s' * (fc['num_hidden_layers'] > 1)} over "
      f"fc(hidden states of target layers {fd['target_layer_ids']}) as keys/values; drafts a block of "
      f"{fd['block_size']} (newest token + mask token {fd['mask_token_id']}) in one non-causal forward; own LM "
      f"head over a draft vocabulary of {fc.get('draft_vocab_size', fc['vocab_size'])} |")
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
    if chat:
        c_ship = find(log, "chat_valid_loss", model="target-chat")
        w(f"| target, chat tune (embedding frozen) | {cfg['chat_steps']} | "
          f"{find(log, 'lm_train_tokens', model='chat', final=True)['lm_train_tokens']:,} LM + "
          f"{find(log, 'chat_train_answer_tokens', model='chat', final=True)['chat_train_answer_tokens']:,} answer | "
          f"{cfg['chat_lr']} | {c_ship['shipped_bf16_valid_loss']:.3f} (BF16 as shipped; "
          f"{chat[-1]['valid_loss_before']:.3f} before) | {math.exp(c_ship['shipped_bf16_valid_loss']):.1f} |")
    w(f"| draft, pre-training | {cfg['draft_steps']} | {d_final['train_tokens']:,} | {cfg['draft_lr']} | "
      f"{d_final['valid_loss']:.3f} | {d_final['valid_ppl']:.1f} |")
    w(f"| draft, distilled (with the heads) | {cfg['heads_steps']} | | {cfg['distill_lr']} | "
      f"{d_ship['shipped_bf16_valid_loss']:.3f} (data loss, BF16) | {math.exp(d_ship['shipped_bf16_valid_loss']):.1f} |")
    agree = h_final["valid_agree"]
    w(f"| EAGLE-3 + MTP, target frozen | {cfg['heads_steps']} | | {cfg['heads_lr']} | "
      f"soft-label CE vs the target: EAGLE-3 {h_final['valid_loss']['eagle3']:.2f}, MTP "
      f"{h_final['valid_loss']['mtp']:.2f} (sums over {cfg['ttt_steps']} weighted drafting steps) | |")
    u_final = find(log, "valid_agree", model="medusa", final=True)
    u_tokens = find(log, "train_tokens", model="medusa", trained=True)["train_tokens"]
    w(f"| Medusa heads, target frozen | {cfg['medusa_steps']} | {u_tokens:,} | "
      f"{cfg['medusa_lr']} | soft-label CE vs the target, per head: "
      f"{', '.join(f'{x:.2f}' for x in u_final['valid_head_loss'])} | |")
    f_final = find(log, "valid", model="dflash", final=True)
    f_tokens = find(log, "train_tokens", model="dflash", trained=True)["train_tokens"]
    w(f"| DFlash drafter, target frozen | {cfg['dflash_steps']} | {f_tokens:,} | {cfg['dflash_lr']} | soft-label CE vs the target "
      f"over block rows (weights exp(-(j-1)/{cfg['dflash_gamma']})): {f_final['valid']['loss']:.2f} (BF16 as shipped) | |")
    w("\nThe heads are trained as they draft: unrolled over "
      f"{cfg['ttt_steps']} steps, each step reading the previous step's output (training-time test), "
      "against the target's own next-token distribution, never the data's. Top-1 agreement with the "
      "target's greedy token on the validation split, per drafting step: "
      f"draft model {agree['draft'][0]:.2f}; EAGLE-3 {', '.join(f'{x:.2f}' for x in agree['eagle3'])}; "
      f"MTP {', '.join(f'{x:.2f}' for x in agree['mtp'])}; Medusa (heads 1..{len(u_final['valid_agree'])}, "
      f"each guessing from the same state) {', '.join(f'{x:.2f}' for x in u_final['valid_agree'])}; DFlash (block "
      f"rows 1..{len(f_final['valid']['agree'])}, all from one forward, teacher-forced at every "
      f"{f_final['anchor_stride']}th position) {', '.join(f'{x:.2f}' for x in f_final['valid']['agree'])}, "
      f"expected acceptance length at k = 4 {f_final['valid']['accept_len_k4']:.2f}.\n")
    w("Stage times (this 2-core machine): " + ", ".join(
        f"{r['stage']} {r['wall_s'] / 60:.1f} min" + (f" ({r['threads']} thread{'s' * (r['threads'] > 1)})"
                                                       if "threads" in r else "") for r in stages)
      + f"; total {total_wall / 60:.1f} min wall, {total_cpu / 60:.1f} CPU-minutes.\n")
    if chat:
        write_chat(w, a, log, cfg, chat[-1])

    w("## Acceptance (Baton's engine)\n")
    w("`bench/run_spec_bench.sh family` on the HumanEval prompts (`bench/data/HumanEval.jsonl.gz`), "
      f"greedy, batch 1, k = {bench[0]['speculative_config'].get('num_speculative_tokens')}, "
      f"{bench[0]['prompts']} prompts, up to {bench[0]['max_tokens']} generated tokens each. Mean acceptance length = "
      "1 + accepted / drafts (tokens emitted per verification step); the TPOT ratio is speculative / plain, "
      "paired per prompt in one run (median; below 1 is faster). "
      + ("Output was token-identical to plain greedy decoding for every prompt and method.\n"
         if all(mismatches(b) == 0 for b in bench) else
         "**Some outputs differed from plain greedy decoding (see the last column): a bug.**\n"))
    w("| method | mean acceptance length | acceptance rate | per position (1..k) | TPOT ratio | greedy mismatches |")
    w("|---|---|---|---|---|---|")
    for b in bench:
        method = b["speculative_config"]["method"]
        pos = ", ".join(f"{x:.2f}" for x in b["acceptance_per_position"])
        w(f"| {method} | {b['mean_acceptance_length']:.2f} | {b['acceptance_rate']:.2f} | {pos} | "
          f"{b['tpot_ratio_median']:.2f} | {mismatches(b)} |")
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
