#!/usr/bin/env python3
"""The GPU's measured BF16 tensor-core rate: the ceiling that prefill TFLOP/s is judged against.

Part of bench/gpu/run_device_checks.sh (step "speed_baton"). Times an N x N x N BF16 matrix product
through torch (cuBLAS) on random data, rotating among three input sets so that repeated products do
not run from the L2, with CUDA events: three warm-ups, then the median of ten timed products.
Prints one JSON object: {"bf16_matmul_flops_per_s": ..., "n": N, "times_ms": [...], "device": ...}.

Must not: time zeros (they run faster than real data), or run anywhere but on a CUDA device.
"""
import argparse
import json
import statistics
import sys

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("tensor_core_peak: no CUDA device", file=sys.stderr)
        return 1
    n = args.n
    gen = torch.Generator(device="cuda").manual_seed(1)
    sets = [(torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)) for _ in range(3)]
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    times = []
    for i in range(3 + args.steps):
        a, b = sets[i % len(sets)]
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b, out=out)
        stop.record()
        stop.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(stop))
    if not torch.isfinite(out.float()).all():
        print("tensor_core_peak: the product is not finite", file=sys.stderr)
        return 1
    median_ms = statistics.median(times)
    print(json.dumps({"bf16_matmul_flops_per_s": 2.0 * n ** 3 / (median_ms / 1e3), "n": n,
                      "times_ms": times, "device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
