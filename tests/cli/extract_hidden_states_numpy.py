"""`baton generate` with extract_hidden_states, read back by a plain numpy safetensors reader.

What it checks
  On a few fixture architectures: `--json` reports kv_transfer_params.hidden_states_path; the file
  parses as safetensors with nothing but json, struct and numpy (8-byte header length, JSON
  header, tensors at their data_offsets); token_ids (I64) is the prompt; hidden_states (F32)
  [tokens, layers, hidden] equals the float64 reference's layer inputs (the fixture's
  reference.json, from tools/reference/transformer_ref.py) within 1e-4, in the listed layer order.
  Also: --kv-transfer-config without the method is refused, naming the flag.

What it must not do
  Import anything of Baton's own tooling to read the file: the point is that any reader can.
"""

import json
import os
import struct
import subprocess
import sys

import numpy as np

NUMPY_DTYPES = {"F32": np.float32, "I64": np.int64, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        out[name] = np.frombuffer(raw, dtype=NUMPY_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def run(baton, args, expect_ok=True):
    r = subprocess.run([baton] + args, capture_output=True, text=True, timeout=300)
    if expect_ok and r.returncode != 0:
        sys.exit(f"baton {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def main():
    baton, fixtures, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(scratch, exist_ok=True)
    kv = json.dumps({"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                     "kv_connector_extra_config": {"shared_storage_path": scratch}})
    for name in ["llama-f32", "qwen3-moe-f32", "qwen3-next-f32"]:
        model = os.path.join(fixtures, name)
        with open(os.path.join(model, "reference.json")) as f:
            ref = json.load(f)
        prompt = ref["prompt_token_ids"]
        states = np.asarray(ref["hidden_states"], dtype=np.float64)  # [layers + 1, tokens, hidden]
        layers = [states.shape[0] - 2, 0]
        spec = json.dumps({"method": "extract_hidden_states", "num_speculative_tokens": 1,
                           "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layers}}})
        r = run(baton, ["generate", "--model", model, "--prompt-tokens", ",".join(map(str, prompt)),
                        "--max-tokens", "1", "--json", "--output", "token-ids",
                        "--speculative-config", spec, "--kv-transfer-config", kv])
        out = json.loads(r.stdout)
        path = out["kv_transfer_params"]["hidden_states_path"]
        assert os.path.dirname(path) == os.path.realpath(scratch), (path, scratch)
        assert out["token_ids"] == ref["greedy_token_ids"][:1], (name, out["token_ids"])
        t = read_safetensors(path)
        assert sorted(t) == ["hidden_states", "token_ids"], sorted(t)
        assert t["token_ids"].tolist() == prompt, name
        hs = t["hidden_states"]
        assert hs.shape == (len(prompt), len(layers), states.shape[2]), (name, hs.shape)
        for i, layer in enumerate(layers):
            err = np.abs(hs[:, i, :].astype(np.float64) - states[layer]).max()
            assert err < 1e-4, f"{name}: layer {layer} differs from the reference by {err}"
        os.remove(path)
        print(f"{name}: {hs.shape} equal to the reference within 1e-4")

    r = run(baton, ["generate", "--model", os.path.join(fixtures, "llama-f32"), "--prompt-tokens", "5,6",
                    "--kv-transfer-config", kv], expect_ok=False)
    assert r.returncode != 0 and "--kv-transfer-config" in r.stderr, r.stderr
    print("ok")


if __name__ == "__main__":
    main()
