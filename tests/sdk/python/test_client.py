"""The Python SDK (sdk/python, baton_client) against a live `baton up` cluster: Client (sync and
streaming), AsyncClient, abort, timeouts, model info, tokenize, errors, the typed sampling arguments
(SamplingParams, unknown names refused) and call metadata. Texts are compared with
local `baton generate` (one engine, no router) and `baton generate --endpoint` (the C++ CLI's
client through the same router), never with recorded outputs."""
import asyncio
import json
import os
import unittest

import grpc

from baton_client import AsyncClient, BatonError, Client, SamplingParams
from baton_cluster import FAMILY, Cluster, endpoint_generate, local_generate

PROMPT = "def fibonacci(n):"


def long_tokens() -> int:
    """max_tokens of a request that runs for seconds (with ignore_eos): what the model's length allows."""
    with Client(cluster.address, timeout=30) as c:
        return c.model_info().max_model_len - 64


def setUpModule():
    global cluster
    cluster = Cluster()


def tearDownModule():
    code = cluster.stop()
    if code != 0:
        raise AssertionError(f"baton up exited with {code}: {cluster.stderr_tail()}")


class ConvertTest(unittest.TestCase):
    def test_kv_transfer_params_reach_the_result(self):
        from baton_client import GenerateResult
        from baton_client._convert import delta
        from baton_client._proto import api_pb2
        m = api_pb2.GenerateResponse(request_id="r", token_ids=[5], text="x", finish_reason=api_pb2.FINISH_REASON_LENGTH)
        self.assertIsNone(delta(m).kv_transfer_params)
        m.kv_transfer_params.hidden_states_path = "/data/hs/r.safetensors"
        result = GenerateResult()
        result.append(delta(api_pb2.GenerateResponse(request_id="r", token_ids=[4], text="w")))
        result.append(delta(m))
        self.assertEqual(result.kv_transfer_params, {"hidden_states_path": "/data/hs/r.safetensors"})
        self.assertEqual(result.token_ids, [4, 5])


class SyncClientTest(unittest.TestCase):
    def setUp(self):
        self.client = Client(cluster.address, timeout=120)

    def tearDown(self):
        self.client.close()

    def test_generate_equals_local_and_cli_endpoint(self):
        local = local_generate(PROMPT, "--max-tokens", "48", "--temperature", "0")
        via_cli = endpoint_generate(cluster.address, PROMPT, "--max-tokens", "48", "--temperature", "0")
        r = self.client.generate(PROMPT, max_tokens=48, temperature=0)
        self.assertEqual(r.text, local["text"])
        self.assertEqual(r.token_ids, local["token_ids"])
        self.assertEqual(r.text, via_cli["text"])
        self.assertEqual(r.finish_reason, local["finish_reason"])
        self.assertTrue(r.request_id)
        self.assertEqual(r.usage.prompt_tokens, local["prompt_tokens"])
        self.assertEqual(r.usage.completion_tokens, len(r.token_ids))
        self.assertGreater(r.usage.speculation.num_drafts, 0)  # baton up drafts with EAGLE-3
        self.assertGreater(r.usage.timings.end_to_end_ms, 0)
        # Per position (k = 4) and by draft length (0..4), in the SDK and in the CLI's JSON alike.
        s = r.usage.speculation
        self.assertEqual(len(s.accepted_per_position), 4)
        self.assertEqual(sum(s.accepted_per_position), s.num_accepted_tokens)
        self.assertEqual(len(s.proposals_by_length), 5)
        self.assertGreaterEqual(sum(s.proposals_by_length), s.num_drafts)
        cli_spec = via_cli["spec"]
        self.assertEqual(len(cli_spec["accepted_per_position"]), 4)
        self.assertEqual(sum(cli_spec["accepted_per_position"]), cli_spec["num_accepted_tokens"])
        self.assertEqual(len(cli_spec["proposals_by_length"]), 5)
        self.assertIn("decode role", via_cli["backend"])

    def test_stop_string_and_seed(self):
        # A stop string from the middle of the greedy continuation: the text ends right before its
        # first occurrence, as a local run with the same stop string ends.
        full = local_generate(PROMPT, "--max-tokens", "64", "--temperature", "0", "--ignore-eos")["text"]
        words = [w for w in full.split() if len(w) >= 4 and full.index(w) > 0]
        self.assertTrue(words, full)
        stop = words[len(words) // 2]
        local = local_generate(PROMPT, "--max-tokens", "64", "--temperature", "0", "--ignore-eos", "--stop", stop)
        r = self.client.generate(PROMPT, max_tokens=64, temperature=0, ignore_eos=True, stop=[stop])
        self.assertEqual(r.text, local["text"])
        self.assertEqual(r.text, full[:full.index(stop)])
        self.assertEqual((r.finish_reason, r.stop_string), ("stop", stop))
        # Sampled with a seed: the same tokens every time (speculation keeps the distribution, not
        # the engine-without-speculation's exact draws, so the reference is the cluster itself).
        a, b = (self.client.generate(PROMPT, max_tokens=32, temperature=0.8, top_p=0.9, seed=7) for _ in range(2))
        self.assertEqual(a.token_ids, b.token_ids)
        self.assertEqual(len(a.token_ids), 32)

    def test_stream_joins_to_the_completion(self):
        whole = self.client.generate(PROMPT, max_tokens=40, temperature=0)
        deltas = list(self.client.stream(PROMPT, max_tokens=40, temperature=0))
        self.assertGreater(len(deltas), 1)
        self.assertEqual("".join(d.text for d in deltas), whole.text)
        self.assertEqual([t for d in deltas for t in d.token_ids], whole.token_ids)
        self.assertTrue(all(d.finish_reason is None for d in deltas[:-1]))
        self.assertEqual(deltas[-1].finish_reason, "length")
        self.assertEqual(deltas[-1].usage.completion_tokens, 40)

    def test_logprobs(self):
        r = self.client.generate(PROMPT, max_tokens=8, temperature=0, logprobs=2)
        self.assertEqual([l.token for l in r.logprobs], r.token_ids)
        for l in r.logprobs:
            self.assertLessEqual(l.logprob, 0.0)
            self.assertEqual(len(l.top), 2)
            self.assertEqual(l.top[0].token, l.token)

    def test_abort(self):
        request_id = f"py-abort-{os.getpid()}"
        stream = self.client.stream(PROMPT, max_tokens=long_tokens(), ignore_eos=True, temperature=0, request_id=request_id)
        first = next(stream)
        self.assertEqual(first.request_id, request_id)
        self.assertTrue(self.client.abort(request_id))
        rest = list(stream)
        self.assertEqual(rest[-1].finish_reason if rest else first.finish_reason, "abort")
        self.assertFalse(self.client.abort("no-such-request"))

    def test_timeout(self):
        with self.assertRaises(BatonError) as e:
            self.client.generate(PROMPT, max_tokens=long_tokens(), ignore_eos=True, timeout=0.3)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        with Client(cluster.address, timeout=0.3) as hasty, self.assertRaises(BatonError) as e:
            for _ in hasty.stream(PROMPT, max_tokens=long_tokens(), ignore_eos=True):
                pass
        self.assertEqual(e.exception.code_name, "DEADLINE_EXCEEDED")
        self.assertEqual(self.client.generate(PROMPT, max_tokens=4).usage.completion_tokens, 4)

    def test_model_info_and_tokenize(self):
        info = self.client.model_info()
        with open(os.path.join(FAMILY, "target", "config.json")) as f:
            self.assertEqual(info.vocab_size, json.load(f)["vocab_size"])
        self.assertEqual(info.model, "target")
        self.assertTrue(info.has_tokenizer)
        self.assertIn("eagle3", info.speculative_config)
        self.assertEqual((info.num_prefill_nodes, info.num_decode_nodes), (1, 1))
        self.assertIn("speculative eagle3 k=4", info.backend)
        t = self.client.tokenize(PROMPT)
        self.assertEqual(t.prompt, PROMPT)
        by_text = self.client.generate(PROMPT, max_tokens=16, temperature=0)
        self.assertEqual(len(t.ids), by_text.usage.prompt_tokens)
        by_ids = self.client.generate(token_ids=t.ids, max_tokens=16, temperature=0)
        self.assertEqual(by_ids.token_ids, by_text.token_ids)

    def test_errors(self):
        with self.assertRaises(BatonError) as e:
            self.client.generate(PROMPT, max_tokens=8, top_p=2.0)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("top_p", e.exception.message)
        self.assertTrue(str(e.exception).startswith("INVALID_ARGUMENT: "))
        with self.assertRaises(ValueError):
            self.client.generate(PROMPT, token_ids=[1, 2])
        with Client("127.0.0.1:1", timeout=5) as nowhere, self.assertRaises(BatonError) as e:
            nowhere.model_info()
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)


class TypedArgumentsTest(unittest.TestCase):
    """Sampling is typed keywords or a SamplingParams; a misspelt name fails the call (TypeError
    naming it) instead of being dropped, and so never reaches the router."""

    def setUp(self):
        self.client = Client(cluster.address, timeout=120)

    def tearDown(self):
        self.client.close()

    def test_unknown_names_raise_type_error(self):
        with self.assertRaisesRegex(TypeError, "'temprature'"):
            self.client.generate(PROMPT, max_tokens=4, temprature=0)
        with self.assertRaisesRegex(TypeError, "'max_token'"):
            self.client.stream(PROMPT, max_token=4)  # at the call, before any iteration
        with self.assertRaisesRegex(TypeError, "'top_pp'"):
            SamplingParams(top_pp=0.5)
        with self.assertRaisesRegex(TypeError, "SamplingParams"):
            self.client.generate(PROMPT, sampling={"max_tokens": 4})

        async def run():
            async with AsyncClient(cluster.address, timeout=30) as c:
                with self.assertRaisesRegex(TypeError, "'temprature'"):
                    await c.generate(PROMPT, temprature=0)
                with self.assertRaisesRegex(TypeError, "'bogus'"):
                    c.stream(PROMPT, bogus=1)
        asyncio.run(run())

    def test_sampling_params_equal_the_keywords(self):
        local = local_generate(PROMPT, "--max-tokens", "24", "--temperature", "0")
        greedy = SamplingParams(max_tokens=24, temperature=0)
        by_object = self.client.generate(PROMPT, sampling=greedy)
        self.assertEqual(by_object.token_ids, local["token_ids"])
        self.assertEqual(self.client.generate(PROMPT, max_tokens=24, temperature=0).token_ids, by_object.token_ids)
        # A keyword overrides the object's field; the object is not changed.
        shorter = self.client.generate(PROMPT, sampling=greedy, max_tokens=8)
        self.assertEqual(shorter.token_ids, local["token_ids"][:8])
        self.assertEqual(greedy.max_tokens, 24)
        streamed = [t for d in self.client.stream(PROMPT, sampling=greedy) for t in d.token_ids]
        self.assertEqual(streamed, local["token_ids"])

    def test_max_speculative_tokens(self):
        # 0 turns speculation off for this request: the same greedy tokens, no drafts.
        plain = self.client.generate(PROMPT, max_tokens=24, temperature=0, max_speculative_tokens=0)
        self.assertEqual(plain.token_ids, self.client.generate(PROMPT, max_tokens=24, temperature=0).token_ids)
        self.assertEqual(plain.usage.speculation.num_drafts, 0)

    def test_logit_bias(self):
        # +100 forces a token at every position, in a SamplingParams and as a keyword alike.
        x = self.client.tokenize("x", add_special_tokens=False).ids
        self.assertEqual(len(x), 1)
        forced = self.client.generate(PROMPT, max_tokens=6, temperature=0, logit_bias={x[0]: 100.0})
        self.assertEqual(forced.token_ids, x * 6)
        by_object = self.client.generate(PROMPT, sampling=SamplingParams(max_tokens=6, temperature=0,
                                                                         logit_bias={x[0]: 100.0}))
        self.assertEqual(by_object.token_ids, x * 6)
        with self.assertRaisesRegex(BatonError, "logit_bias"):
            self.client.generate(PROMPT, max_tokens=4, logit_bias={x[0]: 101.0})

    def test_response_format(self):
        # A JSON schema, given as a dict or as its JSON text: the answer ends on its own, as JSON the
        # schema accepts.
        messages = [{"role": "user", "content": "Is 7 a prime number? Answer in JSON."}]
        schema = {"type": "object", "properties": {"prime": {"type": "boolean"}}, "required": ["prime"],
                  "additionalProperties": False}
        fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        for given in (fmt, json.dumps(fmt)):
            r = self.client.generate(messages=messages, max_tokens=64, temperature=0, response_format=given)
            self.assertEqual(r.finish_reason, "stop", r.text)
            answer = json.loads(r.text)
            self.assertEqual(list(answer), ["prime"])
            self.assertIsInstance(answer["prime"], bool)
        with self.assertRaisesRegex(BatonError, "pattern"):
            self.client.generate(PROMPT, max_tokens=4, response_format={
                "type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a+"}}})


    def test_tools_and_calls_reach_the_template(self):
        # OpenAI's tool list and an assistant's call (arguments as JSON text or a dict): the bundled
        # template lists each tool as its JSON and writes the call as a <tool_call> line.
        tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                                 "parameters": {"type": "object",
                                                                "properties": {"city": {"type": "string"}}}}}
        for arguments in ('{"city": "Oslo"}', {"city": "Oslo"}):
            messages = [{"role": "user", "content": "Weather in Oslo?"},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": arguments}}]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "cold"}]
            t = self.client.tokenize(messages=messages, tools=[tool])
            self.assertIn("# tools\n" + json.dumps(tool, ensure_ascii=False) + "\n", t.prompt)
            self.assertIn('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>', t.prompt)
            self.assertIn("# tool\ncold\n", t.prompt)
        r = self.client.generate(messages=messages, tools=[tool], max_tokens=8, temperature=0)
        self.assertEqual(r.usage.prompt_tokens, len(t.ids))
        bad = [messages[0], dict(messages[1], tool_calls=[{"id": "c", "function": {"name": "f", "arguments": "[1]"}}])]
        with self.assertRaisesRegex(BatonError, r"messages\[1\]\.tool_calls\[0\]\.arguments must be an object"):
            self.client.tokenize(messages=bad)
        with self.assertRaisesRegex(ValueError, "tools go with messages"):
            self.client.generate(PROMPT, tools=[tool])


class MetadataTest(unittest.TestCase):
    """Client and per-call metadata go out with the calls (the router without API keys ignores
    what it does not read); malformed metadata is refused before any call. test_tls.py checks that
    the router reads it: an API key sent as metadata authenticates."""

    def test_client_and_call_metadata(self):
        with Client(cluster.address, timeout=60, metadata={"x-request-tag": "client"}) as c:
            self.assertEqual(c.generate(PROMPT, max_tokens=4, metadata=[("x-request-tag", "call")])
                             .usage.completion_tokens, 4)
            self.assertTrue(c.tokenize(PROMPT, metadata={"x-other": "1", "x-bin": b"\x00\x01"}).ids)
            for bad in ("x-a: b", [("x-a",)], [("x-a", 1)]):
                with self.assertRaises(TypeError):
                    c.model_info(metadata=bad)
        with self.assertRaises(TypeError):
            Client(cluster.address, metadata=[("x-a", None)])


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        # The reference runs here, not in the event loop (a blocking wait there stalls it).
        cls.local = local_generate(PROMPT, "--max-tokens", "32", "--temperature", "0")

    async def test_generate_stream_and_concurrency(self):
        local = self.local
        async with AsyncClient(cluster.address, timeout=120) as client:
            r = await client.generate(PROMPT, max_tokens=32, temperature=0)
            self.assertEqual(r.text, local["text"])
            self.assertEqual(r.token_ids, local["token_ids"])
            deltas = [d async for d in client.stream(PROMPT, max_tokens=32, temperature=0)]
            self.assertEqual("".join(d.text for d in deltas), local["text"])
            # Several at once on one channel: each equals the one-at-a-time result.
            many = await asyncio.gather(*(client.generate(PROMPT, max_tokens=32, temperature=0) for _ in range(4)))
            self.assertEqual([m.text for m in many], [local["text"]] * 4)
            info = await client.model_info()
            self.assertTrue(info.has_tokenizer)
            self.assertEqual(len((await client.tokenize(PROMPT)).ids), r.usage.prompt_tokens)

    async def test_abort_and_errors(self):
        async with AsyncClient(cluster.address, timeout=120) as client:
            request_id = f"py-async-abort-{os.getpid()}"
            stream = client.stream(PROMPT, max_tokens=long_tokens(), ignore_eos=True, request_id=request_id)
            first = await stream.__anext__()
            self.assertEqual(first.request_id, request_id)
            self.assertTrue(await client.abort(request_id))
            rest = [d async for d in stream]
            self.assertEqual(rest[-1].finish_reason if rest else first.finish_reason, "abort")
            with self.assertRaises(BatonError) as e:
                await client.generate(PROMPT, max_tokens=long_tokens(), ignore_eos=True, timeout=0.3)
            self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            with self.assertRaises(BatonError) as e:
                await client.generate(PROMPT, top_p=2.0)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
