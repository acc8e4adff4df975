#!/usr/bin/python3
"""Example: stream one greedy completion from a Baton router with the Python client SDK.

    baton up --port 50051 &
    PYTHONPATH=sdk/python sdk/python/examples/generate.py 127.0.0.1:50051 "def fibonacci(n):" --max-tokens 64
"""
import argparse
import sys

from baton_client import BatonError, Client


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("prompt")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int)
    args = ap.parse_args()
    with Client(args.endpoint, timeout=120) as client:
        try:
            last = None
            for delta in client.stream(args.prompt, max_tokens=args.max_tokens, temperature=args.temperature,
                                       seed=args.seed):
                sys.stdout.write(delta.text)
                sys.stdout.flush()
                last = delta
        except BatonError as e:
            print(f"\nerror: {e}", file=sys.stderr)
            return 1
    u = last.usage
    print(f"\n{u.prompt_tokens} prompt + {u.completion_tokens} generated tokens, finish: {last.finish_reason}, "
          f"time to first token {u.timings.time_to_first_token_ms:.1f} ms", file=sys.stderr)
    if u.speculation.num_drafts:
        print(f"speculation: {u.speculation.num_drafts} drafts, mean acceptance length "
              f"{u.speculation.mean_acceptance_length:.3f}", file=sys.stderr)
    return 1 if last.finish_reason == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
