"""Build the bundled hybrid model models/baton-tiny-hybrid: corpus -> target -> mtp -> check -> card.

What it is for
  tools/train/build_hybrid.sh wraps it with `nice` and Debian's python3:
      /usr/bin/python3 tools/train/build_hybrid.py [--preset cpu|smoke] [--out models/baton-tiny-hybrid]
          [--work build/hybrid] [--stages corpus,target,mtp,check,card] [--threads 2]
  A Qwen3NextForCausalLM (gated DeltaNet and gated attention layers 3:1, MoE with a shared
  expert, tied embeddings) with its multi-token-prediction layer (`mtp.*`), trained on the bundled
  family's data with the family's tokenizer (models/baton-tiny-code), so that Baton's hybrid
  model path and its MTP speculation run on real, trained weights. Stages (each reads the
  previous stages' files, so a later stage can be rerun alone):
    corpus  build_family.py's corpus stage (tools/train/corpus.py -> WORK/corpus, and
            OUT/corpus_manifest.json), then data.py encodes both splits with the family's
            tokenizer (FAMILY/target/tokenizer.json) -> WORK/data/{train,valid}.npy
    target  qwen3_next.py's model, trained like train_lm.py (AdamW, warm-up + cosine, bf16
            autocast through qwen3_next_mtp.amp_ready, plus the MoE load-balancing term)
            -> WORK/target_base and OUT/target (BF16, no mtp.* yet; the family's tokenizer files
            copied unchanged); validation loss measured on the BF16 weights
    mtp     qwen3_next_mtp.py's MTP layer trained against the frozen BF16 target (unrolled
            drafting, soft labels from the target) -> OUT/target/model.safetensors = the target's
            tensors (bit-identical to WORK/target_base's) + mtp.* (BF16), config.json with
            num_nextn_predict_layers 1; agreement measured on the BF16 weights as shipped
    check   Baton's engine on the shipped directory (build/release/cli/baton): greedy output on the
            10 prompts of check_engine_greedy.py equals this framework's (qwen3_next.py, BF16 weights
            upcast), plainly and with {"method":"mtp","num_speculative_tokens":2} (no `model`: the
            layer is read from the target); then bench/spec_bench on the HumanEval prompts for
            acceptance (k = 2 and 4, greedy, batch 1; token mismatches must be 0); then the first
            prompt through a `baton up` cluster (router, prefill and decode node), plainly and with
            MTP, must give the same tokens; a sample -> WORK/check.json, WORK/sample.json
    card    OUT/README.md from OUT/training_log.json, the shipped files and WORK/sample.json (no
            figure typed by hand)
  `--verify` runs only the check stage's engine checks on the shipped OUT and writes nothing (exit
  status 1 on any mismatch): the test to run after a change to the engine or to these files.
  Everything trained is seeded; batches depend only on (seed, step). Every stage's records (losses,
  validation, timings: wall and CPU seconds) go to OUT/training_log.json.
  Presets: `cpu` is the shipped model (target + mtp within 90 minutes on 2 idle cores); `smoke`
  the same shapes with a handful of steps (pipeline check; write it elsewhere with --out/--work).

What it must not do
  Touch anything outside --out and --work (it only reads the family's tokenizer and the corpus);
  train the MTP layer against weights other than the target exactly as shipped (BF16); change the
  target's tensors in the mtp stage; depend on wall-clock for what is trained; write a figure into
  the card that no file holds.
"""

import argparse
import gzip
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_family  # noqa: E402
import check_engine_greedy  # noqa: E402
import data  # noqa: E402
import qwen3_next_mtp as qm  # noqa: E402
import tokenizer_bpe  # noqa: E402
import train_lm  # noqa: E402
from qwen3_next import Qwen3NextConfig, Qwen3NextForCausalLM, init_weights, load_hf_dir, save_hf_dir  # noqa: E402
from safetensors_io import read_model_dir  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
FAMILY = os.path.join(REPO, "models", "baton-tiny-code")
STAGES = ("corpus", "target", "mtp", "check", "card")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

# Qwen3-Next's layout at 1/8 of its width: 8 layers, every 4th gated full attention (LLLF LLLF),
# DeltaNet with 2 key heads / 4 value heads of 64, attention 4 heads / 2 KV heads of 64 with a
# quarter of each head rotated, 8 experts (top 2, renormalised) of 128 + a shared expert of 128 in
# every layer, tied embeddings over the family's 4096-token vocabulary.
TINY_HYBRID = dict(vocab_size=tokenizer_bpe.VOCAB_SIZE, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64, partial_rotary_factor=0.25,
                   rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=2048, tie_word_embeddings=True,
                   full_attention_interval=4, linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4, num_experts=8,
                   num_experts_per_tok=2, norm_topk_prob=True, moe_intermediate_size=128,
                   shared_expert_intermediate_size=128, decoder_sparse_step=1, mlp_only_layers=[],
                   bos_token_id=0, eos_token_id=0)
PRESETS = {
    "cpu": dict(target=TINY_HYBRID, seq_len=512, batch=8, amp=True, seed=1234, target_steps=2200, target_lr=2e-3,
                mtp_steps=1200, mtp_lr=2e-3, ttt_steps=4, chain_fraction=0.25, warmup=50, eval_every=100,
                eval_windows=24, check_max_tokens=64, bench_prompts=164, bench_max_tokens=128),
}
PRESETS["smoke"] = dict(PRESETS["cpu"], seq_len=128, batch=2, target_steps=6, mtp_steps=4, warmup=2, eval_every=3,
                        eval_windows=2, check_max_tokens=16, bench_prompts=4, bench_max_tokens=16)
MTP_SPEC = {"method": "mtp", "num_speculative_tokens": 2}


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


# ----------------------------------------------------------------------------- corpus


def stage_corpus(p, a, log):
    build_family.stage_corpus(p, a, log)  # WORK/corpus, OUT/corpus_manifest.json, a "corpus" record
    sizes = data.encode_corpus(os.path.join(a.work, "corpus"), a.tokenizer, os.path.join(a.work, "data"))
    tok = tokenizer_bpe.load(a.tokenizer)
    log.append({"stage": "tokenizer", "source": os.path.relpath(a.tokenizer, REPO), "vocab_size": len(tok.vocab),
                "merges": len(tok.ranks), "tokens": sizes,
                "sha256": {f: file_sha256(os.path.join(a.tokenizer, f)) for f in TOKENIZER_FILES}})
    print(f"[corpus] tokens {sizes} with {a.tokenizer}", flush=True)


def streams(a, p, windows_limit=None):
    d = os.path.join(a.work, "data")
    train = data.load_stream(d, "train")
    valid = data.valid_windows(data.load_stream(d, "valid"), p["seq_len"] + 1, windows_limit)
    return train, valid


def copy_tokenizer(a, directory):
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(a.tokenizer, name), os.path.join(directory, name))


# ----------------------------------------------------------------------------- target


def count_parameters(model):
    """(total, active per token): the experts count top_k / num_experts of theirs as active."""
    c = model.config
    total = sum(t.numel() for t in model.state_dict().values())
    experts = sum(t.numel() for k, t in model.state_dict().items() if ".experts." in k)
    return total, total - experts + experts * c.num_experts_per_tok // c.num_experts


def train_target(model, stream, valid, *, steps, batch, seq_len, lr, warmup, seed, device, amp, eval_every,
                 eval_windows, log, name="target"):
    """train_lm.train_lm's loop for the hybrid: the same schedule, optimizer, batches and records,
    plus the MoE load-balancing term (qwen3_next_mtp.AUX_COEF) in the loss."""
    qm.amp_ready(model).to(device).train()
    opt = train_lm.make_optimizer(model.named_parameters(), lr)
    start, tokens = time.time(), 0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = train_lm.lr_at(step, steps, lr, warmup)
        ids = data.train_batch(stream, step, batch, seq_len + 1, seed).to(device)
        with train_lm.autocast(device, amp):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        aux = qm.moe_aux_loss(model)
        opt.zero_grad(set_to_none=True)
        (loss + qm.AUX_COEF * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += ids[:, 1:].numel()
        if step % 10 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rec = {"model": name, "step": step, "loss": round(float(loss), 4), "aux": round(float(aux), 4),
                   "lr": opt.param_groups[0]["lr"], "tokens": tokens, "elapsed_s": round(elapsed, 1),
                   "cpu_s": round(time.process_time(), 1), "tokens_per_s": round(tokens / elapsed)}
            log.append(rec)
            print(f"[{name}] step {step}/{steps} loss {rec['loss']:.4f} aux {rec['aux']:.3f} lr {rec['lr']:.2e} "
                  f"{rec['tokens_per_s']} tok/s {elapsed / 60:.1f} min", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step != steps - 1:
            v = train_lm.evaluate(model, valid[:eval_windows], batch, device)
            log.append({"model": name, "step": step, "valid_loss": round(v, 4), "valid_ppl": round(math.exp(v), 2),
                        "expert_shares": qm.expert_shares(model)})
            print(f"[{name}] step {step} valid loss {v:.4f} ppl {math.exp(v):.2f}", flush=True)
    v = train_lm.evaluate(model, valid, batch, device)
    log.append({"model": name, "step": steps, "valid_loss": round(v, 4), "valid_ppl": round(math.exp(v), 2),
                "final": True, "train_tokens": tokens, "elapsed_s": round(time.time() - start, 1)})
    print(f"[{name}] final valid loss {v:.4f} ppl {math.exp(v):.2f} ({tokens} tokens)", flush=True)
    return v


def stage_target(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    # qwen3_next.init_weights leaves in_proj_qkvz / in_proj_ba at torch's default init (uniform
    # +-1/sqrt(hidden)), drawn from the global generator, whose start this torch seeds at random.
    torch.manual_seed(p["seed"])
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**p["target"]))
    init_weights(model, generator=torch.Generator().manual_seed(p["seed"]))
    train_target(model, train, valid, steps=p["target_steps"], batch=p["batch"], seq_len=p["seq_len"],
                 lr=p["target_lr"], warmup=p["warmup"], seed=p["seed"], device=a.device, amp=p["amp"],
                 eval_every=p["eval_every"], eval_windows=p["eval_windows"], log=log)
    base = os.path.join(a.work, "target_base")
    extra = {"router_aux_loss_coef": qm.AUX_COEF}
    save_hf_dir(model.cpu(), base, torch.bfloat16, extra_config=extra)
    copy_tokenizer(a, base)
    out = os.path.join(a.out, "target")
    if os.path.isdir(out):
        shutil.rmtree(out)
    shutil.copytree(base, out)  # the mtp stage adds the mtp.* tensors
    shipped = load_hf_dir(out, a.device)  # the BF16 weights as shipped, upcast
    v = train_lm.evaluate(shipped, valid, p["batch"], a.device)
    total, active = count_parameters(shipped)
    log.append({"model": "target", "shipped_bf16_valid_loss": round(v, 4), "parameters": total,
                "active_parameters": active})
    print(f"[target] shipped (BF16) valid loss {v:.4f}; {total} parameters ({active} active)", flush=True)


# ----------------------------------------------------------------------------- mtp


def stage_mtp(p, a, log):
    train, valid = streams(a, p, a.valid_limit)
    base = os.path.join(a.work, "target_base")
    target = load_hf_dir(base, a.device)
    mtp = qm.init_mtp(qm.Qwen3NextMtp(target.config), p["seed"] + 3)
    log.append({"stage": "mtp", "base_sha256": file_sha256(os.path.join(base, "model.safetensors"))})
    qm.amp_ready(target)
    qm.amp_ready(mtp)
    qm.train_mtp(target, mtp, train, valid, steps=p["mtp_steps"], batch=p["batch"], seq_len=p["seq_len"],
                 lr=p["mtp_lr"], warmup=p["warmup"], seed=p["seed"] + 3, device=a.device, amp=p["amp"],
                 ttt_steps=p["ttt_steps"], chain_fraction=p["chain_fraction"], eval_every=p["eval_every"],
                 eval_windows=p["eval_windows"], log=log)
    with open(os.path.join(base, "config.json")) as f:
        extra = {k: v for k, v in json.load(f).items() if k == "router_aux_loss_coef"}
    extra["num_nextn_predict_layers"] = 1
    out = os.path.join(a.out, "target")
    base_model = load_hf_dir(base)  # the BF16 values, upcast; written back to BF16 exactly
    save_hf_dir(base_model, out, torch.bfloat16, extra_config=extra, extra_tensors=qm.mtp_tensors(mtp.cpu()))
    copy_tokenizer(a, out)
    stored, original = read_model_dir(out), read_model_dir(base)
    if not all(torch.equal(stored[k], original[k]) for k in original) or \
            sorted(set(stored) - set(original)) != sorted(qm.mtp_tensors(mtp)):
        raise SystemExit("mtp stage: the shipped target tensors differ from WORK/target_base's")
    shipped, tensors = load_hf_dir(out, a.device, mtp=True)
    shipped_mtp = qm.load_mtp(shipped.config, tensors).to(a.device)
    v, agree = qm.evaluate_mtp(shipped, shipped_mtp, valid, p["batch"], p["ttt_steps"], a.device)
    params = sum(t.numel() for t in tensors.values())
    log.append({"model": "mtp", "shipped_bf16_valid_loss": v, "shipped_bf16_valid_agree": agree, "parameters": params})
    print(f"[mtp] shipped (BF16): valid loss {v}, agreement per step {agree}; {params} parameters", flush=True)


# ----------------------------------------------------------------------------- check


def run_engine(cmd):
    for attempt in range(10):  # the binary can be missing for a moment while it is relinked
        if os.path.exists(cmd[0]):
            break
        print(f"[check] {cmd[0]} missing; waiting", flush=True)
        time.sleep(60)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return out.stdout


@torch.no_grad()
def framework_greedy(model, ids, max_tokens, eos):
    """Greedy decoding by full recomputation (qwen3_next.py has no cache); stops after EOS."""
    seq, out = list(ids), []
    for _ in range(max_tokens):
        token = int(model(torch.tensor([seq]))[0, -1].argmax())
        out.append(token)
        seq.append(token)
        if token == eos:
            break
    return out


def serve_check(a, target_dir, prompt, max_tokens, spec, expected):
    """`baton up` (router, a prefill node and a decode node; the recurrent state travels with the KV)
    on the shipped directory, one `baton generate --endpoint` through it; the tokens must be
    `expected`. The cluster is stopped with Ctrl-C (SIGINT), as a user would."""
    cmd = [a.baton, "up", "--model", target_dir, "--port", "0", "--threads", "1"]
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    lines, ready = [], threading.Event()

    def drain(stream):
        for line in stream:
            lines.append(line)
            if " ready on " in line:
                ready.set()
        ready.set()  # exited

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = threading.Thread(target=drain, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        ready.wait(180)
        found = [ln.split(" ready on ")[1].split()[0] for ln in lines if " ready on " in ln]
        if not found:
            raise SystemExit(f"{' '.join(cmd)} did not get ready: {''.join(lines)[-2000:]}")
        eng = json.loads(run_engine([a.baton, "generate", "--endpoint", found[0], "--prompt", prompt,
                                     "--max-tokens", str(max_tokens), "--json"]).splitlines()[0])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    rec = {"command": "baton up" + (f" --speculative-config '{json.dumps(spec)}'" if spec else ""),
           "match": eng["token_ids"] == expected, "tokens": len(expected), "prefill_node": eng.get("prefill_node")}
    if spec:
        rec["acceptance_rate"] = eng["spec"]["acceptance_rate"]
    print(f"[check] {json.dumps(rec)}", flush=True)
    return rec


def stage_check(p, a, log):
    log[:] = [r for r in log if r.get("stage") != "check"]  # a rerun replaces the earlier results
    target_dir = os.path.join(a.out, "target")
    model, _ = load_hf_dir(target_dir, mtp=True)
    tok = tokenizer_bpe.load(target_dir)
    eos = model.config.eos_token_id
    runs, totals = [], {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    for prompt in check_engine_greedy.PROMPTS:
        ids = tok.encode(prompt, add_bos=True)
        mine = framework_greedy(model, ids, p["check_max_tokens"], eos)
        for name, spec in (("plain", None), ("mtp", MTP_SPEC)):
            cmd = [a.baton, "generate", "--model", target_dir, "--prompt", prompt, "--max-tokens",
                   str(p["check_max_tokens"]), "--json", "--threads", str(a.threads)]
            if spec:
                cmd += ["--speculative-config", json.dumps(spec)]
            eng = json.loads(run_engine(cmd).splitlines()[0])
            rec = {"prompt": prompt, "engine": name, "match": eng["token_ids"] == mine, "tokens": len(mine)}
            if not rec["match"]:
                first = next((i for i, (x, y) in enumerate(zip(mine, eng["token_ids"])) if x != y),
                             min(len(mine), len(eng["token_ids"])))
                with torch.no_grad():  # a tiny top-1/top-2 margin there means a numerical near-tie
                    top2 = torch.topk(model(torch.tensor([ids + mine[:first]]))[0, -1], 2).values
                rec.update({"first_difference": first, "framework": mine[first:first + 5],
                            "engine_ids": eng["token_ids"][first:first + 5],
                            "framework_margin_there": round(float(top2[0] - top2[1]), 5)})
            if spec:
                s = eng["spec"]
                rec["acceptance_rate"] = s["acceptance_rate"]
                totals["drafts"] += s["num_drafts"]
                totals["draft_tokens"] += s["num_draft_tokens"]
                totals["accepted"] += s["num_accepted_tokens"]
            runs.append(rec)
            print(f"[check] {json.dumps(rec)}", flush=True)
    matching = sum(r["match"] for r in runs)
    greedy = {"prompts": len(check_engine_greedy.PROMPTS), "max_tokens": p["check_max_tokens"], "runs": len(runs),
              "matching": matching, "spec": MTP_SPEC, **totals,
              "acceptance_rate": round(totals["accepted"] / max(1, totals["draft_tokens"]), 4),
              "mean_acceptance_length": round(1 + totals["accepted"] / max(1, totals["drafts"]), 4)}
    bench = []
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "humaneval.jsonl")
        with gzip.open(os.path.join(REPO, "bench", "data", "HumanEval.jsonl.gz"), "rb") as src, \
                open(prompts, "wb") as dst:
            dst.write(src.read())
        for k in (2, 4):
            cmd = [a.spec_bench, "--model", target_dir, "--prompts", prompts, "--num-prompts",
                   str(p["bench_prompts"]), "--max-tokens", str(p["bench_max_tokens"]), "--threads", "1",
                   "--cases", "batch1_greedy", "--spec", json.dumps({"method": "mtp", "num_speculative_tokens": k})]
            for line in run_engine(cmd).splitlines():
                if line.strip().startswith("{"):
                    b = json.loads(line)
                    bench.append(b)
                    print(f"[check] spec_bench k={k}: " + json.dumps({x: b.get(x) for x in (
                        "prompts", "mean_acceptance_length", "acceptance_rate", "acceptance_per_position",
                        "token_mismatches", "tpot_ratio_median")}), flush=True)
    sample_cmd = [a.baton, "generate", "--model", target_dir, "--prompt", "def fibonacci(n):", "--max-tokens", "96",
                  "--json", "--threads", str(a.threads)]
    sample = json.loads(run_engine(sample_cmd).splitlines()[0])
    first = runs[0]  # the framework's tokens for PROMPTS[0] (all runs matched them, or we fail below)
    expected = framework_greedy(model, tok.encode(first["prompt"], add_bos=True), p["check_max_tokens"], eos)
    serving = [serve_check(a, target_dir, first["prompt"], p["check_max_tokens"], spec, expected)
               for spec in (None, MTP_SPEC)]
    result = {"greedy": greedy, "runs": runs, "spec_bench": bench, "serving": serving}
    if not a.verify:
        write_json(os.path.join(a.work, "sample.json"), sample)
        write_json(os.path.join(a.work, "check.json"), result)
    log.append({"stage": "check", "greedy": greedy, "serving": serving,
                "spec_bench": [{k: b.get(k) for k in ("speculative_config", "prompts", "max_tokens",
                                                       "mean_acceptance_length", "acceptance_rate",
                                                       "acceptance_per_position", "token_mismatches",
                                                       "greedy_mismatches", "tpot_ratio_median") if k in b}
                               for b in bench]})
    bad = ([r for r in runs + serving if not r["match"]]
           + [b for b in bench if check_engine_greedy_mismatches(b)])
    if bad:
        raise SystemExit(f"check: {len(bad)} mismatching runs: "
                         f"{json.dumps([r for r in runs + serving if not r['match']])[:3000]}; "
                         "spec_bench token mismatches: "
                         f"{[check_engine_greedy_mismatches(b) for b in bench]}")
    print(f"[check] greedy: {matching}/{len(runs)} runs equal; MTP k=2 acceptance {greedy['acceptance_rate']}",
          flush=True)


def check_engine_greedy_mismatches(b):
    return b.get("token_mismatches", b.get("greedy_mismatches", 0))


# ----------------------------------------------------------------------------- card


def find(log, key, **match):
    rows = [r for r in log if key in r and all(r.get(k) == v for k, v in match.items())]
    if not rows:
        raise SystemExit(f"training_log.json has no record with {key} and {match}")
    return rows[-1]


def fmt_params(n):
    return f"{n / 1e6:.2f}M"


def dir_bytes(directory):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory) for f in files)


def stage_card(p, a, log):
    """OUT/README.md from the log, the shipped files and WORK/sample.json."""
    target_dir = os.path.join(a.out, "target")
    with open(os.path.join(target_dir, "config.json")) as f:
        tc = json.load(f)
    c = Qwen3NextConfig.from_hf(tc)
    stored = read_model_dir(target_dir)
    mtp_params = sum(t.numel() for k, t in stored.items() if k.startswith("mtp."))
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in stored.values()})
    with open(os.path.join(a.work, "sample.json")) as f:
        sample = json.load(f)
    corpus = find(log, "packages", stage="corpus")
    tok = find(log, "vocab_size", stage="tokenizer")
    t_final = find(log, "train_tokens", model="target", final=True)
    t_ship = find(log, "shipped_bf16_valid_loss", model="target")
    m_final = find(log, "valid_agree", model="mtp", final=True)
    m_ship = find(log, "shipped_bf16_valid_agree", model="mtp")
    check = find(log, "greedy", stage="check")
    last = {r["stage"]: r for r in log if "wall_s" in r and "stage" in r}  # a rerun stage's latest timing
    train_stages = [last[s] for s in ("corpus", "target", "mtp") if s in last]
    with open(os.path.join(FAMILY, "training_log.json")) as f:
        family_log = json.load(f)["log"]
    f_ship = find(family_log, "shipped_bf16_valid_loss", model="target")
    f_final = find(family_log, "train_tokens", model="target", final=True)
    layers = "".join("F" if t == "full_attention" else "L" for t in c.layer_types)
    n_full = layers.count("F")
    rel = os.path.relpath(target_dir, REPO)
    g = check["greedy"]

    out = []
    w = out.append
    w("# baton-tiny-hybrid\n")
    w("A tiny hybrid model in Qwen3-Next's layout (gated DeltaNet and gated attention layers, a mixture of experts "
      "with a shared expert) with its multi-token-prediction (MTP) layer, trained by Baton's own scripts "
      "(`tools/train/`) on the same Python standard-library corpus and with the same tokenizer as "
      "[`baton-tiny-code`](../baton-tiny-code/README.md), so that Baton's hybrid-model path (the recurrent state "
      "cache) and its MTP speculation run on real, trained weights without any download. It writes "
      "Python-looking code; it is far too small to be useful for anything but demonstrating and testing a "
      "serving system. Rebuild it with `tools/train/build_hybrid.sh` (see [`../README.md`](../README.md)).\n")
    w("| member | architecture | parameters | dtype | what |")
    w("|---|---|---|---|---|")
    w(f"| `target/` | `{tc['architectures'][0]}` | {fmt_params(t_ship['parameters'])} "
      f"({fmt_params(t_ship['active_parameters'])} active per token) | {tc['torch_dtype']} | "
      f"{c.num_hidden_layers} layers `{layers}` ({c.num_hidden_layers - n_full} gated DeltaNet: "
      f"{c.linear_num_key_heads} key heads / {c.linear_num_value_heads} value heads of "
      f"{c.linear_key_head_dim}, conv {c.linear_conv_kernel_dim}; {n_full} gated attention: "
      f"{c.num_attention_heads} heads / {c.num_key_value_heads} KV heads of {c.head_dim}, "
      f"{c.rotary_dim} rotary dims), hidden {c.hidden_size}, MoE in every layer: {c.num_experts} experts of "
      f"{c.moe_intermediate_size} (top {c.num_experts_per_tok}) + a shared expert of "
      f"{c.shared_expert_intermediate_size}, tied embeddings, vocab {c.vocab_size} |")
    w(f"| `target/` `mtp.*` | Qwen3-Next MTP (`num_nextn_predict_layers: {tc['num_nextn_predict_layers']}`), "
      f"in the target's `model.safetensors` | {fmt_params(mtp_params)} (uses the target's embedding and head) | "
      f"{tc['torch_dtype']} | `fc` over [`pre_fc_norm_embedding`(embedding), `pre_fc_norm_hidden`(target's final "
      f"hidden state)], one gated-attention layer with the same MoE (`layers.0`), `norm`; the target's LM head |")
    w(f"\nTensors stored as {', '.join(dtypes)}. Total size on disk: {dir_bytes(a.out) / 1e6:.1f} MB.\n")

    w("## Data\n")
    sp = corpus["splits"]
    w(f"The family's: the `.py` files of Debian 12's Python 3.11 standard library, split by a hash of the path "
      f"(see [baton-tiny-code's Data](../baton-tiny-code/README.md#data)). Train: {sp['train']['num_files']} "
      f"files, {sp['train']['bytes'] / 1e6:.1f} MB, {tok['tokens']['train']:,} tokens; validation: "
      f"{sp['valid']['num_files']} files, {tok['tokens']['valid']:,} tokens. The file list and hashes are in "
      f"`corpus_manifest.json`.\n")
    w(f"Tokenizer: the family's byte-level BPE (vocabulary {tok['vocab_size']}, `<|endoftext|>` = id 0 is BOS, "
      f"EOS and the document separator); `{tok['source']}/tokenizer.json` and `tokenizer_config.json` are "
      "copied unchanged, so the latter carries the family's chat template, but this model is not tuned for "
      "chat: prompt it with code.\n")

    w("## Training\n")
    w(f"Debian's python3-torch on the CPU, seed {p['seed']}, bf16 autocast with float32 weights (the DeltaNet "
      "recurrence, the convolution and the expert mixing in float32); AdamW (0.9, 0.95, wd 0.1), warm-up "
      f"{p['warmup']} steps then cosine to 10%; batches of {p['batch']} x {p['seq_len']} tokens "
      f"({p['batch'] * p['seq_len']} per step); the MoE router gets a load-balancing term "
      f"({qm.AUX_COEF} x E sum f_e P_e).\n")
    w("| stage | steps | tokens seen | peak lr | validation loss (nats/token) | perplexity |")
    w("|---|---|---|---|---|---|")
    w(f"| target | {p['target_steps']} | {t_final['train_tokens']:,} | {p['target_lr']} | "
      f"{t_ship['shipped_bf16_valid_loss']:.3f} (BF16 as shipped) | "
      f"{math.exp(t_ship['shipped_bf16_valid_loss']):.1f} |")
    w(f"| MTP layer, target frozen | {p['mtp_steps']} | | {p['mtp_lr']} | soft-label CE vs the target: "
      f"{m_ship['shipped_bf16_valid_loss']:.2f} (sum over {p['ttt_steps']} weighted drafting steps, BF16 as "
      "shipped) | |")
    w(f"\nFor comparison, the family's dense Llama target ({fmt_params(f_ship['parameters'])} parameters) reached "
      f"{f_ship['shipped_bf16_valid_loss']:.3f} on the same validation split after {f_final['train_tokens']:,} "
      "tokens (before its chat tune). "
      f"The MTP layer is trained as it drafts: unrolled over {p['ttt_steps']} steps, each step reading the "
      "previous step's own normed output (training-time test; later steps on a random "
      f"{p['chain_fraction']:.0%} of the positions), against the target's own next-token distribution, never "
      "the data's (weights 0.8^j). Top-1 agreement with the target's greedy token on the validation split "
      "(every position), per drafting step: "
      f"{', '.join(f'{x:.2f}' for x in m_ship['shipped_bf16_valid_agree'])} (BF16 as shipped; "
      f"{', '.join(f'{x:.2f}' for x in m_final['valid_agree'])} in float32 before the cast).\n")
    total_wall = sum(r["wall_s"] for r in train_stages)
    total_cpu = sum(r["cpu_s"] for r in train_stages)
    w("Stage times (this 2-core machine, shared with other jobs while it ran, so wall time is longer than on an "
      "idle one; CPU-minutes count every thread): " + ", ".join(
          f"{r['stage']} {r['wall_s'] / 60:.1f} min wall / {r['cpu_s'] / 60:.1f} CPU-min ({r['threads']} threads)"
          for r in train_stages)
      + f"; total {total_wall / 60:.1f} min wall, {total_cpu / 60:.1f} CPU-minutes"
      + (f" (then the engine check: {last['check']['wall_s'] / 60:.1f} min wall)" if "check" in last else "")
      + ".\n")

    w("## Baton's engine\n")
    w(f"Checked by the `check` stage of `tools/train/build_hybrid.py` on the files as shipped. Greedy output of "
      f"`baton generate` equals the training framework's (`tools/train/qwen3_next.py`, BF16 weights upcast, full "
      f"recomputation) on the {g['prompts']} prompts of `tools/train/check_engine_greedy.py`, up to "
      f"{g['max_tokens']} tokens each, plainly and with MTP speculation "
      f"(`{json.dumps(g['spec'], separators=(',', ':'))}`, no `model`: the engine reads `mtp.*` from the "
      f"target): {g['matching']} of {g['runs']} runs identical. On those prompts the MTP layer's drafts were "
      f"accepted at a rate of {g['acceptance_rate']:.2f} (mean acceptance length {g['mean_acceptance_length']:.2f}, "
      f"{g['accepted']} of {g['draft_tokens']} draft tokens).\n")
    bench = check["spec_bench"]
    if bench:
        w(f"`bench/spec_bench` on the HumanEval prompts (`bench/data/HumanEval.jsonl.gz`), greedy, batch 1, "
          f"{bench[0]['prompts']} prompts, up to {bench[0]['max_tokens']} generated tokens each, 1 thread. Mean "
          "acceptance length = 1 + accepted / drafts; the TPOT ratio is speculative / plain, paired per prompt "
          "in one run (median; below 1 is faster). "
          + ("Output was token-identical to plain greedy decoding for every prompt.\n"
             if all(check_engine_greedy_mismatches(b) == 0 for b in bench) else
             "**Some outputs differed from plain greedy decoding (see the last column): a bug.**\n"))
        w("| speculative config | mean acceptance length | acceptance rate | per position (1..k) | TPOT ratio | "
          "greedy mismatches |")
        w("|---|---|---|---|---|---|")
        for b in bench:
            pos = ", ".join(f"{x:.2f}" for x in b["acceptance_per_position"])
            spec = {k: b["speculative_config"][k] for k in ("method", "num_speculative_tokens")}
            w(f"| `{json.dumps(spec, separators=(',', ':'))}` | "
              f"{b['mean_acceptance_length']:.2f} | {b['acceptance_rate']:.2f} | {pos} | "
              f"{b['tpot_ratio_median']:.2f} | {check_engine_greedy_mismatches(b)} |")
        w("\nTPOT ratios near or above 1 are expected at this size: a step of a 10M-parameter target is mostly "
          "fixed per-step overhead, so the MTP layer's forward costs a good part of a target step and verifying "
          "k + 1 positions through the DeltaNet layers is dearer than one; acceptance is the figure that carries "
          "over to real models.\n")

    serving = check.get("serving") or []
    if serving:
        w(f"Served through `baton up --model {rel}` (a router, one prefill and one decode node; the recurrent "
          "state travels from the prefill to the decode node with the KV), plainly and with "
          f"`--speculative-config '{json.dumps(MTP_SPEC, separators=(',', ':'))}'`, the first of those prompts "
          f"came back token-identical to the framework's: {sum(r['match'] for r in serving)} of {len(serving)} "
          "runs.\n")
    w("## Run it\n")
    w("```sh")
    w(f"build/release/cli/baton generate --model {rel} --prompt 'def fibonacci(n):'")
    w(f"build/release/cli/baton generate --model {rel} --prompt 'def fibonacci(n):' \\")
    w(f"    --speculative-config '{json.dumps(MTP_SPEC, separators=(',', ':'))}'")
    w(f"build/release/cli/baton up --model {rel}   # then: baton generate --endpoint HOST:PORT --prompt ...")
    w(f"build/release/cli/baton up --model {rel} --speculative-config "
      f"'{json.dumps(MTP_SPEC, separators=(',', ':'))}'")
    w("```\n")
    w("Baton runs it on the CPU backend, with prefix caching off as for every hybrid model "
      "([docs/engine.md](../../docs/engine.md#hybrid-models-qwen3-next)).\n")

    w("## Example\n")
    w(f"`baton generate --model {rel} --prompt 'def fibonacci(n):' --max-tokens 96` (greedy):\n")
    w("```python")
    w("def fibonacci(n):" + sample["text"])
    w("```\n")
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write("\n".join(out))
    print(f"[card] wrote {os.path.join(a.out, 'README.md')}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "baton-tiny-hybrid"))
    ap.add_argument("--work", default=os.path.join(REPO, "build", "hybrid"))
    ap.add_argument("--tokenizer", default=os.path.join(FAMILY, "target"), help="the family's tokenizer files")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--valid-limit", type=int, default=None, help="cap validation windows (smoke runs)")
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "release", "cli", "baton"))
    ap.add_argument("--spec-bench", default=os.path.join(REPO, "build", "release", "bench", "spec_bench"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a preset number for experiments, e.g. --set target_steps=100")
    ap.add_argument("--verify", action="store_true",
                    help="only run the check stage's engine checks on OUT; write nothing; exit 1 on a mismatch")
    a = ap.parse_args(argv)
    p = dict(PRESETS[a.preset])
    for item in a.set:
        key, _, value = item.partition("=")
        if key not in p or isinstance(p[key], (dict, tuple, list)):
            raise SystemExit(f"--set {item}: not a numeric preset key ({sorted(p)})")
        p[key] = type(p[key])(value)
    torch.set_num_threads(a.threads)
    if a.verify:
        stage_check(p, a, [])  # raises SystemExit (status 1) on a mismatch
        return
    stages = a.stages.split(",")
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise SystemExit(f"unknown stages {sorted(unknown)}; known: {STAGES}")
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    log_path = os.path.join(a.out, "training_log.json")
    log = []
    if os.path.exists(log_path) and stages != list(STAGES):
        with open(log_path) as f:
            log = json.load(f)["log"]  # keep earlier stages' records when rerunning some
    total = time.time()
    for stage in STAGES:
        if stage not in stages:
            continue
        t, cpu = time.time(), time.process_time()
        print(f"=== stage {stage} ({a.preset}, {a.device})", flush=True)
        globals()["stage_" + stage](p, a, log)
        if stage != "card":
            # cpu_s (all threads) / threads estimates the wall time on an otherwise idle machine.
            log.append({"stage": stage, "wall_s": round(time.time() - t, 1),
                        "cpu_s": round(time.process_time() - cpu, 1), "preset": a.preset, "device": a.device,
                        "threads": a.threads})
        write_json(log_path, {"preset": a.preset, "config": p, "log": log})
    print(f"=== done in {(time.time() - total) / 60:.1f} min -> {a.out}", flush=True)


if __name__ == "__main__":
    main()
