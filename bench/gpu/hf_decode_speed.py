"""Decode speed of Hugging Face transformers on the Llama-3.1-8B shape that
bench/gpu/llama_decode_bench.cc times in Baton: the yardstick for our tokens/s.

What it is for
  Step "speed" of bench/gpu/run_device_checks.sh:
      python3 bench/gpu/hf_decode_speed.py [--mode eager|compile] [--batches 1,16] [--context 512]
          [--warmup 5] [--steps 30] [--layers 32] --out FILE.json
  Builds LlamaForCausalLM from a LlamaConfig of that shape (hidden 4096, 32 layers, 32 heads,
  8 KV heads, head_dim 128, intermediate 14336, vocab 128256, rope theta 500000, llama3 rope
  scaling, untied head) directly on the GPU in bfloat16 with transformers' own random init (no
  checkpoint, no host-side init), then per batch size: a static KV cache (StaticCache, the cache
  `cache_implementation="static"` uses) sized for the run, a prefill of `context` random tokens,
  and greedy decode steps of one token per sequence through model.forward. A step is timed like
  ours: forward + argmax, then torch.cuda.synchronize(), on the host clock; the median of --steps
  after --warmup is reported, with tokens/s = batch / median.
  --mode compile wraps model.forward in torch.compile(mode="reduce-overhead", fullgraph=True)
  (what transformers' generate does with a static cache: CUDA graphs); its compile time is in
  the warm-up and reported separately. run_device_checks.sh runs eager always and compile only
  when its time budget allows; a failing compile is reported, never fatal.
  Also measures the device-to-device copy bandwidth the same way llama_decode_bench does
  ((read + written bytes) / time) so each side's fraction is against its own measurement.
  Prints and writes one JSON object.

What it must not do
  Download anything (there is no network: the config is built here, the weights are random),
  initialize the 8B weights on the host, or fail silently: an exception is written as
  {"error": ...} with exit status 1.
"""

import argparse
import inspect
import json
import os
import statistics
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def llama31_8b_config(layers):
    from transformers import LlamaConfig
    rope_scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    kw = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers, num_attention_heads=32,
              num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
              rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
              hidden_act="silu", attention_bias=False, mlp_bias=False)
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:  # transformers 5
        kw["rope_parameters"] = dict(rope_scaling, rope_theta=500000.0)
    else:
        kw.update(rope_theta=500000.0, rope_scaling=rope_scaling)
    return LlamaConfig(**kw)


def make_static_cache(config, batch, max_len, device, dtype):
    import transformers
    from transformers import StaticCache
    if int(transformers.__version__.split(".")[0]) >= 5:
        return StaticCache(config=config, max_cache_len=max_len)  # batch, device, dtype: from the first update
    return StaticCache(config=config, max_batch_size=batch, max_cache_len=max_len, device=device, dtype=dtype)


def copy_bandwidth(torch, gib=2.0):
    n = int(gib * (1 << 30))
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        if i >= 3:
            times.append(a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    t = statistics.median(times)
    return {"bytes": n, "median_s": t, "read_write_bytes_per_s": 2 * n / t}


def run(args):
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"bench": "hf_decode_speed", "mode": args.mode, "transformers": transformers.__version__,
           "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    t0 = time.perf_counter()
    config = llama31_8b_config(args.layers)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(prev)
    model.eval()
    torch.cuda.synchronize()
    out["model_build_s"] = time.perf_counter() - t0
    out["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    params = sum(p.numel() for p in model.parameters())
    embed = model.model.embed_tokens.weight.numel()
    out["parameters"] = params
    # What one decode step reads: every parameter but the embedding table (bf16), as in
    # ModelWeights::bytes_per_decode_step().
    out["weight_bytes_per_step"] = 2 * (params - embed)
    sample = model.model.layers[0].mlp.down_proj.weight
    out["weights_nonzero"] = bool(sample.abs().sum().item() > 0)
    out["copy"] = copy_bandwidth(torch)

    forward = model.forward
    sig = inspect.signature(model.forward).parameters
    keep = "logits_to_keep" if "logits_to_keep" in sig else ("num_logits_to_keep" if "num_logits_to_keep" in sig
                                                              else None)
    # Where the new tokens go in the static cache: cache_position where forward() takes it (it has since 4.38).
    pass_cache_position = "cache_position" in sig

    def step_kwargs(positions, batch):
        kw = {"position_ids": positions.unsqueeze(0).expand(batch, -1), "use_cache": True}
        if pass_cache_position:
            kw["cache_position"] = positions
        if keep:
            kw[keep] = 1
        return kw
    if args.mode == "compile":
        forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

    gen = torch.Generator(device="cuda").manual_seed(0)
    decode = []
    compile_s = 0.0
    for batch in args.batches:
        max_len = args.context + args.warmup + args.steps + 8
        cache = make_static_cache(model.config, batch, max_len, "cuda", torch.bfloat16)
        ids = torch.randint(0, config.vocab_size, (batch, args.context), device="cuda", generator=gen)
        with torch.no_grad():
            pos = torch.arange(args.context, device="cuda")
            t = time.perf_counter()
            logits = model(input_ids=ids, past_key_values=cache, **step_kwargs(pos, batch)).logits
            nxt = logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            prefill_s = time.perf_counter() - t
            times = []
            for step in range(args.warmup + args.steps):
                cp = torch.tensor([args.context + step], device="cuda")
                t = time.perf_counter()
                logits = forward(input_ids=nxt, past_key_values=cache, **step_kwargs(cp, batch)).logits
                nxt = logits[:, -1:].argmax(-1).clone()
                torch.cuda.synchronize()
                dt = time.perf_counter() - t
                if step < args.warmup:
                    compile_s += dt if args.mode == "compile" else 0.0
                else:
                    times.append(dt)
            finite = bool(torch.isfinite(logits.float()).all().item())
        med = statistics.median(times)
        decode.append({"batch": batch, "context": args.context, "prefill_s": prefill_s, "warmup_steps": args.warmup,
                       "timed_steps": args.steps, "step_ms_median": med * 1e3, "step_ms_min": min(times) * 1e3,
                       "tokens_per_s": batch / med,
                       "weight_bytes_per_s": out["weight_bytes_per_step"] / med,
                       "fraction_of_copy_bandwidth": out["weight_bytes_per_step"] / med /
                       out["copy"]["read_write_bytes_per_s"],
                       "finite_logits": finite})
        print(f"hf_decode_speed ({args.mode}): batch {batch}: {med * 1e3:.2f} ms/step, {batch / med:.1f} tokens/s",
              file=sys.stderr, flush=True)
        del cache
        torch.cuda.empty_cache()
    out["decode"] = decode
    if args.mode == "compile":
        out["warmup_including_compile_s"] = compile_s
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    try:
        result = run(args)
        status = 0
    except Exception as e:  # noqa: BLE001 — reported in the JSON, the check goes on
        result = {"bench": "hf_decode_speed", "mode": args.mode, "error": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()[-3000:]}
        status = 1
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    return status


if __name__ == "__main__":
    sys.exit(main())
