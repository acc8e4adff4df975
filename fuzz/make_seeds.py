"""Write the hand-made seed inputs of fuzz/corpus/<name>/ (the files named seed-*).

    /usr/bin/python3 fuzz/make_seeds.py            # rewrites every fuzz/corpus/*/seed-* file

Seeds are small valid (and a few almost valid) inputs of each harness's format, so that libFuzzer
starts past the first checks; inputs that libFuzzer found and that were merged in (scripts/fuzz.sh
--merge) are named by their SHA-1 and are left alone. The tokenizer and chat-template seeds are cut
from the repository's own fixtures (tools/fixtures/fixture_tokenizers.py, tests/tokenizer/templates);
protobuf seeds are encoded with `protoc --encode` from text format, so no Python protobuf is needed.

Must not: write outside fuzz/corpus, need anything beyond the standard library and protoc, or
write a seed over 64 KiB.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
MAX_SEED = 64 << 10

sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))
import fixture_tokenizers  # noqa: E402


def write(name, file, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX_SEED, (name, file, len(data))
    d = os.path.join(CORPUS, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + file), "wb") as f:
        f.write(data)


def clear_seeds():
    if not os.path.isdir(CORPUS):
        return
    for name in os.listdir(CORPUS):
        d = os.path.join(CORPUS, name)
        for file in os.listdir(d):
            if file.startswith("seed-"):
                os.remove(os.path.join(d, file))


def proto(message, text):
    out = subprocess.run(["protoc", "--proto_path", os.path.join(ROOT, "proto"), "--encode", message,
                          "baton/v1/node.proto"], input=text.encode(), capture_output=True, check=True)
    return out.stdout


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def openai_request():
    model = "baton-tiny-code"
    completions = {
        "full": {"model": model, "prompt": "def fibonacci(n):", "max_tokens": 16, "temperature": 0.8, "top_p": 0.9,
                 "seed": 1, "stop": ["\n\n", "def "], "stream": True, "stream_options": {"include_usage": True},
                 "n": 1, "logprobs": 3, "request_id": "req-1", "cache_salt": "salt"},
        "extras": {"model": model, "prompt": [1, 2, 3], "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
                   "presence_penalty": -0.5, "frequency_penalty": 0.5, "min_tokens": 2, "ignore_eos": True,
                   "stop_token_ids": [0, 2], "seed": -7, "stop": "x", "max_completion_tokens": 8},
        "nested_ids": {"model": model, "prompt": [[5, 6, 7]], "temperature": 0},
        "nested_text": {"model": model, "prompt": ["hello"], "temperature": None, "stream": False},
        "wrong_model": {"model": "gpt-4", "prompt": "x"},
    }
    for name, body in completions.items():
        write("openai_request", "completions-" + name, "0" + json.dumps(body))
    chat = {
        "full": {"model": model, "messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Hi"},
                                              {"role": "assistant", "content": None},
                                              {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                           {"type": "text", "text": "b"}]}],
                 "logprobs": True, "top_logprobs": 2, "max_tokens": 32, "stream": True,
                 "stream_options": {"include_usage": False}},
        "minimal": {"model": model, "messages": [{"role": "user", "content": "def f():"}]},
        "image_part": {"model": model, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
    }
    for name, body in chat.items():
        write("openai_request", "chat-" + name, "1" + json.dumps(body))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string", "maxLength": 16},
                                                   "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
             {"type": "function", "function": {"name": "now"}}]
    ask = [{"role": "user", "content": "Weather?"}]
    history = ask + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "cold"}]
    tool_chats = {
        "tools-auto": {"model": model, "messages": ask, "tools": tools},
        "tools-required": {"model": model, "messages": ask, "tools": tools, "tool_choice": "required",
                           "parallel_tool_calls": False},
        "tools-named": {"model": model, "messages": ask, "tools": tools,
                        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        "tools-history": {"model": model, "messages": history, "tools": tools, "tool_choice": "none"},
    }
    for name, body in tool_chats.items():
        write("openai_request", "chat-" + name, "1" + json.dumps(body))
    write("openai_request", "not-json", '0{"model": "baton-tiny-code", "prompt": ')
    write("openai_request", "array", '1[{"model": "baton-tiny-code"}]')


def tool_call_parser():
    # Byte 0: the parser (0 hermes, 1 llama3_json, 2 named, 3 required); byte 1: where to cut.
    outputs = [
        (0, 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
            '<tool_call>{"name": "now"}</tool_call>'),
        (0, "plain <tool text"),
        (0, '<tool_call>{"nom": 1}</tool_call> and <tool_call>{"name": "now", "arg'),
        (1, '<|python_tag|>{"name": "now", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "a;}"}}'),
        (1, "  just words"),
        (2, ' {"city" : "Oslo"}\n'),
        (3, '[{"name":"get_weather","parameters":{"city":"Oslo"}},{"name":"now","parameters":{}}]'),
        (3, '[{"name":"now","param'),
    ]
    for i, (parser, text) in enumerate(outputs):
        write("tool_call_parser", f"{i}", bytes([parser, 7]) + text.encode())


def convert():
    sampling = """temperature: 0.7 top_k: 40 top_p: 0.9 min_p: 0.05 repetition_penalty: 1.1
      presence_penalty: 0.5 frequency_penalty: -0.5 seed: 42 max_tokens: 64 min_tokens: 1
      stop_token_ids: 2 stop_token_ids: 7 stop: "\\n\\n" stop: "END" ignore_eos: false
      include_stop_str_in_output: true logprobs: 5 max_speculative_tokens: 3"""
    write("convert", "prefill", b"\x00" + proto("baton.node.v1.PrefillRequest", f"""
      request_id: "r1" prompt: [1, 2, 3, 4] sampling {{ {sampling} }} cache_salt: 9
      destination {{ request_id: "r1" decode_address: "127.0.0.1:5" transport: "ucx" kv_blocks: [0, 1] lease_ms: 100 }}"""))
    write("convert", "commit", b"\x01" + proto("baton.node.v1.CommitRequest", f"""
      record {{ request_id: "r1" prompt: [1, 2, 3, 4, 5] sampling {{ {sampling} }} seed: 123 first_token: 9
        first_logprob: -0.25 first_top_logprobs {{ token: 9 logprob: -0.25 }} first_top_logprobs {{ token: 4 logprob: -2 }}
        num_cached_prompt_tokens: 16 kv_blocks: [3, 4] proposer_kv_positions: 5 proposer_kv_blocks: [7]
        proposer_feature_rows: "\\000\\000\\200\\077\\000\\000\\000\\100\\000\\000\\100\\100\\000\\000\\200\\100"
        proposer_feature_width: 2 cache_salt: 77 }}
      prefill_instance_id: 1 capability: "cap" """))
    write("convert", "commit-bad-rows", b"\x01" + proto("baton.node.v1.CommitRequest", """
      record { request_id: "r2" proposer_feature_rows: "\\001\\002\\003" proposer_feature_width: 1 }"""))
    write("convert", "decode-local", b"\x02" + proto("baton.node.v1.DecodeRequest", f"""
      request_id: "r3" local {{ prompt: [5, 6] sampling {{ {sampling} }} cache_salt: 1 }} commit_timeout_ms: 10
      capability: "c" """))
    write("convert", "decode-response", b"\x03" + proto("baton.node.v1.DecodeResponse", """
      token_ids: [1, 2] text: "ab" logprobs { token: 1 logprob: -0.5 top { token: 1 logprob: -0.5 } top { token: 3 logprob: -1.5 } }
      finish_reason: FINISH_REASON_LENGTH num_prompt_tokens: 4 num_output_tokens: 2"""))
    write("convert", "sampling-greedy", b"\x04" + proto("baton.v1.SamplingParams", "temperature: 0 max_tokens: 1"))
    write("convert", "sampling-empty", b"\x04")


def spec_config():
    configs = {
        "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5,
                  "disable_by_batch_size": 8, "adaptive_draft_length": True},
        "suffix": {"method": "suffix", "suffix_decoding_max_tree_depth": 24, "suffix_decoding_max_cached_requests": 100,
                   "suffix_decoding_max_spec_factor": 1.5, "suffix_decoding_min_token_prob": 0.1,
                   "proposer_endpoint": "127.0.0.1:7000", "proposer_budget_ms": 5},
        "prefill": {"method": "ngram", "num_speculative_tokens": 1},
        "draft": {"method": "draft_model", "model": "models/draft", "num_speculative_tokens": 3,
                  "draft_sample_method": "probabilistic", "rejection_sample_method": "block",
                  "draft_tensor_parallel_size": 1},
        "eagle": {"method": "eagle", "model": "e", "num_speculative_tokens": 2},
        "eagle3": {"method": "eagle3", "model": "e3", "num_speculative_tokens": 4, "rejection_sample_method": "standard"},
        "mtp": {"method": "mtp"},
        "mtp-k": {"method": "mtp", "num_speculative_tokens": 1, "model": None, "draft_sample_method": "greedy"},
        "unknown-key": {"method": "ngram", "num_speculative_tokens": 4, "speculative_model": "x"},
        "medusa": {"method": "medusa", "num_speculative_tokens": 4},  # no model: refused
        "medusa-default-k": {"method": "medusa", "model": "m", "draft_sample_method": "probabilistic"},
        "dflash": {"method": "dflash", "model": "d", "num_speculative_tokens": 7, "draft_sample_method": "probabilistic"},
        "dflash-no-k": {"method": "dflash", "model": "d"},  # k is required: refused
        "extract-hidden-states": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                  "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}},
        "entropy": {"method": "eagle3", "model": "e3", "num_speculative_tokens": 4,
                    "rejection_sampler_config": {"enable_block_verify": True, "enable_entropy_verify": True,
                                                 "posterior_threshold": 0.95, "posterior_alpha": 0.4}},
    }
    for name, c in configs.items():
        write("spec_config", name, json.dumps(c))


def tokenizer_and_templates():
    with tempfile.TemporaryDirectory() as tmp:
        fixture_tokenizers.main(["--out", tmp])
        seen = set()
        for name in sorted(os.listdir(tmp)):
            d = os.path.join(tmp, name)
            if not os.path.isdir(d):
                continue
            with open(os.path.join(d, "tokenizer.json"), "rb") as f:
                tok = f.read()
            with open(os.path.join(d, "tokenizer_config.json")) as f:
                template = json.load(f).get("chat_template")
            if tok not in seen:
                seen.add(tok)
                write("tokenizer", name, tok)
            if template and template.encode() not in seen:
                seen.add(template.encode())
                write("chat_template", name, template)
    minimal = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<unk>": 3}, "merges": ["a b"],
                         "unk_token": "<unk>"},
               "added_tokens": [{"id": 4, "content": "<s>", "special": True, "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False}]}
    write("tokenizer", "minimal", json.dumps(minimal))
    templates = os.path.join(ROOT, "tests", "tokenizer", "templates")
    for file in sorted(os.listdir(templates)):
        with open(os.path.join(templates, file), "rb") as f:
            write("chat_template", os.path.splitext(file)[0], f.read())
    snippets = {
        "tojson": "{{ {'b': 1, 'a': [1, 'x', true, none]} | tojson }}",
        "loop": "{% for m in messages %}{{ loop.index }}:{{ m['role'] | upper }}{% if not loop.last %},{% endif %}{% endfor %}",
        "set-block": "{% set x %}a{{ 1 + 2 * 3 }}b{% endset %}{{ x | length }}{{ x[1:] }}",
        "macro": "{% macro f(a, b=2) %}{{ a ~ b }}{% endmacro %}{{ f(1) }}{{ f(b=3, a=4) }}",
        "range": "{% for i in range(3, 10, 2) %}{{ i // 2 }}{{ i % 3 }}{% endfor %}{{ range(4) | list | tojson }}",
        "strings": "{{ '  a,b  '.strip().split(',') | join('-') }}{{ 'x' * 3 }}{{ 'Ab'.lower() ~ 'ab'.title() }}",
        "raise": "{% if messages | length > 100 %}{{ raise_exception('too many') }}{% endif %}ok",
        "dict": "{% set d = dict(a=1, b=[2, 3]) %}{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}{{ d.items() | list | length }}",
    }
    for name, t in snippets.items():
        write("chat_template", name, t)


def safetensors():
    def file(header, data=b""):
        h = json.dumps(header, separators=(",", ":")).encode()
        return struct.pack("<Q", len(h)) + h + data

    write("safetensors", "one-f32", file({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                                          "__metadata__": {"format": "pt"}}, bytes(range(16))))
    write("safetensors", "mixed", file({
        "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
        "b": {"dtype": "F16", "shape": [1, 1], "data_offsets": [6, 8]},
        "c": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
        "d": {"dtype": "U8", "shape": [2], "data_offsets": [16, 18]},
        "e": {"dtype": "BOOL", "shape": [], "data_offsets": [18, 19]},
        "f": {"dtype": "I32", "shape": [0, 5], "data_offsets": [19, 19]},
    }, bytes(19)))
    write("safetensors", "overlap", file({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                          "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(6)))
    write("safetensors", "truncated", file({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)))
    write("safetensors", "empty-header", file({}))


def ucx_descriptor():
    def blob(b):
        return struct.pack("<I", len(b)) + b

    def descriptor(pools, shm=None):
        out = b"BUCX" + struct.pack("<I", 2) + blob(b"\x01worker-address") + struct.pack("<I", len(pools))
        for name, base, size, rkey in pools:
            out += blob(name) + struct.pack("<QQ", base, size) + blob(rkey)
        if shm is None:
            return out + struct.pack("<I", 0)
        out += struct.pack("<I", 1) + blob(shm[0])
        for rkey in shm[1]:
            out += blob(rkey)
        return out

    write("ucx_descriptor", "one-pool", descriptor([(b"target", 0x7F0000000000, 1 << 20, b"\x10rkey")]))
    write("ucx_descriptor", "two-pools-shm", descriptor(
        [(b"target", 0x1000, 4096, b"k1"), (b"draft", 0x9000, 8192, b"k2")], (b"shm-worker", [b"s1", b"s2"])))
    write("ucx_descriptor", "version-1", b"BUCX" + struct.pack("<I", 1) + blob(b"w"))


def kv_link():
    def stream(*messages):
        out = b""
        for text in messages:
            m = proto("baton.node.v1.KvLinkMessage", text)
            out += varint(len(m)) + m
        return out

    hello = 'hello { link_kind: "nccl" link_id: "\\001\\002" pool_names: ["target", "draft"] max_segment_bytes: 65536 }'
    put = ('put { transfer: 1 request_id: "r1" pool: 0 capability: "cap" '
           'copies { dst_offset: 0 bytes: 131072 } copies { dst_offset: 131072 bytes: 4096 } copies { dst_offset: 1048000 bytes: 1000 } }')
    put_draft = 'put { transfer: 1 request_id: "r1" pool: 1 copies { dst_offset: 65000 bytes: 536 } copies { dst_offset: 8 bytes: 0 } }'
    put_bad = 'put { transfer: 2 request_id: "r2" pool: 5 copies { dst_offset: 18446744073709551615 bytes: 2 } }'
    finish = "finish { transfer: 1 }"
    write("kv_link", "transfer", stream(hello, put, put_draft, finish))
    write("kv_link", "bad-pool", stream(hello, put_bad, "finish { transfer: 2 }"))
    write("kv_link", "small-pieces", stream(hello.replace("65536", "4096"), put))


def main():
    clear_seeds()
    openai_request()
    tool_call_parser()
    convert()
    spec_config()
    tokenizer_and_templates()
    safetensors()
    ucx_descriptor()
    kv_link()


if __name__ == "__main__":
    main()
