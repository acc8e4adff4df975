"""Target features for draft-head training, computed by Baton's own engine (extract_hidden_states).

What it is for
  EAGLE-3 heads are trained on the target's residual stream entering a few layers
  (`eagle_aux_hidden_state_layer_ids`). BatonFeatures.states() gets those for a batch of token
  windows from `baton generate --prompts-file` with
      --speculative-config '{"method": "extract_hidden_states", "draft_model_config":
                             {"hf_config": {"eagle_aux_hidden_state_layer_ids": [...]}}}'
      --kv-transfer-config '{"kv_connector": "ExampleHiddenStatesConnector", ...}'
  (one engine per batch, the windows batched in it), and reads the files it writes: the features
  come from the engine that serves the model, the way vLLM users build them. aux() shapes them
  like train_heads.target_pass's `aux`. test_baton_features.py checks that they agree with the
  PyTorch forward's.
  As a command:
      /usr/bin/python3 tools/train/baton_features.py --baton build/release/cli/baton
          --model models/baton-tiny-code/target --layers 2,4,5 --windows 4 --seq-len 128
  prints the shape and the largest difference from the PyTorch forward.

What it must not do
  Read a file before `baton generate` reported it (a reported file is complete); leave files
  behind (each batch's are removed once read); add a BOS token (the windows are passed as ids).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from safetensors_io import read_safetensors  # noqa: E402


class BatonFeatures:
    def __init__(self, baton, model_dir, layer_ids, work_dir=None, threads=None):
        self.baton = baton
        self.model_dir = model_dir
        self.layer_ids = list(layer_ids)
        self.work_dir = work_dir
        self.threads = threads

    def states(self, ids):
        """ids [B, T] (int) -> [B, T, len(layer_ids), hidden] float32: layer l's input at each position."""
        work = tempfile.mkdtemp(prefix="baton-features-", dir=self.work_dir)
        try:
            prompts = os.path.join(work, "windows.jsonl")
            with open(prompts, "w") as f:
                for row in ids.tolist():
                    f.write(json.dumps({"prompt_tokens": row, "max_tokens": 1}) + "\n")
            spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                    "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": self.layer_ids}}}
            kv = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                  "kv_connector_extra_config": {"shared_storage_path": os.path.join(work, "states")}}
            argv = [self.baton, "generate", "--model", self.model_dir, "--prompts-file", prompts, "--json",
                    "--output", "token-ids", "--temperature", "0", "--log-level", "error",
                    "--max-num-seqs", str(max(1, ids.shape[0])),
                    "--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(kv)]
            if self.threads:
                argv += ["--threads", str(self.threads)]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
            if r.returncode != 0:
                raise RuntimeError(f"baton generate failed ({r.returncode}): {r.stderr[-2000:]}")
            paths = {}
            for line in r.stdout.splitlines():
                if line.startswith("{"):
                    j = json.loads(line)
                    if "index" in j:
                        paths[j["index"]] = j["kv_transfer_params"]["hidden_states_path"]
            out = []
            for i, row in enumerate(ids.tolist()):
                t = read_safetensors(paths[i])
                if t["token_ids"].tolist() != row:
                    raise RuntimeError(f"{paths[i]}: token_ids are not window {i}'s")
                out.append(t["hidden_states"])
            return torch.stack(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def aux(self, ids):
        """As train_heads.target_pass's aux: [B, T - 1, len(layer_ids) * hidden], layers side by side."""
        s = self.states(ids)
        return s.reshape(s.shape[0], s.shape[1], -1)[:, :-1]


def main(argv=None):
    from llama import load_hf_dir
    import train_heads

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baton", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--layers", required=True, help="comma-separated layer ids")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    a = ap.parse_args(argv)
    layers = [int(x) for x in a.layers.split(",")]
    target = load_hf_dir(a.model).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, target.config.vocab_size, (a.windows, a.seq_len), generator=gen)
    _, want, _ = train_heads.target_pass(target, ids, layers, "cpu", False)
    got = BatonFeatures(a.baton, a.model, layers).aux(ids)
    print(json.dumps({"shape": list(got.shape), "max_abs_diff": float((got - want).abs().max()),
                      "max_abs_value": float(want.abs().max())}))


if __name__ == "__main__":
    main()
