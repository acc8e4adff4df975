"""The Python SDK against `baton up --tls --api-keys-file`: Client and AsyncClient reach the router
over TLS (verifying it with the cluster's ca.pem) with a key from the argument or BATON_API_KEY, and
get the local `baton generate` tokens; without the key the router answers UNAUTHENTICATED, and
without TLS the handshake fails (UNAVAILABLE). Call metadata reaches the router: a key sent as the
client's or a call's `authorization` metadata authenticates (and names the caller, whose requests
only it can abort); metadata that would override an api_key is refused."""
import asyncio
import os
import tempfile
import unittest
from unittest import mock

import grpc

from baton_client import AsyncClient, BatonError, Client
from baton_cluster import Cluster, local_generate

PROMPT = "def fibonacci(n):"
KEY = "py-sdk-test-key"
OTHER_KEY = "py-sdk-other-key"


def setUpModule():
    global cluster, keys
    keys = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
    keys.write(f"# the test's keys\n{KEY}\n{OTHER_KEY}\n")
    keys.close()
    cluster = Cluster(extra_args=("--tls", "--api-keys-file", keys.name))


def tearDownModule():
    code = cluster.stop()
    os.unlink(keys.name)
    if code != 0:
        raise AssertionError(f"baton up exited with {code}: {cluster.stderr_tail()}")


class TlsClientTest(unittest.TestCase):
    def test_tls_and_key_give_the_local_tokens(self):
        local = local_generate(PROMPT, "--max-tokens", "32", "--temperature", "0")
        with Client(cluster.address, tls_ca=cluster.ca_file, api_key=KEY, timeout=120) as c:
            r = c.generate(PROMPT, max_tokens=32, temperature=0)
            self.assertEqual(r.token_ids, local["token_ids"])
            self.assertEqual(r.text, local["text"])
            self.assertTrue(c.model_info().model)

    def test_key_from_the_environment(self):
        with mock.patch.dict(os.environ, {"BATON_API_KEY": KEY}):
            with Client(cluster.address, tls_ca=cluster.ca_file, timeout=60) as c:
                self.assertTrue(c.tokenize(PROMPT).ids)

    def test_without_a_key_unauthenticated(self):
        env = {k: v for k, v in os.environ.items() if k != "BATON_API_KEY"}
        with mock.patch.dict(os.environ, env, clear=True):
            for key in (None, "wrong-key"):
                with Client(cluster.address, tls_ca=cluster.ca_file, api_key=key, timeout=30) as c:
                    with self.assertRaises(BatonError) as e:
                        c.generate(PROMPT, max_tokens=4)
                    self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                    self.assertNotIn("wrong-key", e.exception.message)

    def test_plain_text_to_the_tls_port_fails(self):
        with Client(cluster.address, api_key=KEY, timeout=10) as c:
            with self.assertRaises(BatonError) as e:
                c.model_info()
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_unreadable_ca_file_is_named(self):
        with self.assertRaises(ValueError) as e:
            Client(cluster.address, tls_ca="/nonexistent/ca.pem")
        self.assertIn("/nonexistent/ca.pem", str(e.exception))

    def test_async_client(self):
        async def run():
            async with AsyncClient(cluster.address, tls_ca=cluster.ca_file, api_key=KEY, timeout=120) as c:
                return await c.generate(PROMPT, max_tokens=16, temperature=0)

        local = local_generate(PROMPT, "--max-tokens", "16", "--temperature", "0")
        self.assertEqual(asyncio.run(run()).token_ids, local["token_ids"])


def without_env_key():
    return mock.patch.dict(os.environ, {k: v for k, v in os.environ.items() if k != "BATON_API_KEY"}, clear=True)


class MetadataTest(unittest.TestCase):
    def test_key_as_client_and_call_metadata(self):
        with without_env_key():
            bearer = ("authorization", f"Bearer {KEY}")
            with Client(cluster.address, tls_ca=cluster.ca_file, metadata=[bearer, ("x-request-tag", "a")],
                        timeout=60) as c:
                self.assertEqual(c.generate(PROMPT, max_tokens=4).usage.completion_tokens, 4)
                # A call's authorization replaces the client's: a wrong one is refused.
                with self.assertRaises(BatonError) as e:
                    c.model_info(metadata={"authorization": "Bearer wrong-key"})
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            with Client(cluster.address, tls_ca=cluster.ca_file, timeout=60) as c:
                with self.assertRaises(BatonError) as e:
                    c.model_info()
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                self.assertTrue(c.model_info(metadata=[bearer]).model)
                self.assertTrue(c.tokenize(PROMPT, metadata={"Authorization": f"Bearer {KEY}"}).ids)

    def test_metadata_may_not_override_the_api_key(self):
        with without_env_key():
            with self.assertRaisesRegex(ValueError, "authorization"):
                Client(cluster.address, tls_ca=cluster.ca_file, api_key=KEY, metadata={"authorization": "Bearer x"})
            with Client(cluster.address, tls_ca=cluster.ca_file, api_key=KEY, metadata={"x-request-tag": "a"},
                        timeout=60) as c:
                with self.assertRaisesRegex(ValueError, "api_key"):
                    c.model_info(metadata=[("Authorization", f"Bearer {OTHER_KEY}")])
                self.assertTrue(c.model_info(metadata=[("x-request-tag", "b")]).model)
        with mock.patch.dict(os.environ, {"BATON_API_KEY": KEY}):
            with self.assertRaisesRegex(ValueError, "BATON_API_KEY"):
                Client(cluster.address, tls_ca=cluster.ca_file, metadata={"authorization": f"Bearer {KEY}"})

    def test_call_metadata_names_the_caller(self):
        # Request ids belong to the key that started them: only a call carrying that key (here as
        # call metadata) finds the request to abort.
        with without_env_key(), Client(cluster.address, tls_ca=cluster.ca_file, api_key=KEY, timeout=120) as owner, \
                Client(cluster.address, tls_ca=cluster.ca_file, timeout=30) as anyone:
            request_id = f"py-metadata-abort-{os.getpid()}"
            stream = owner.stream(PROMPT, max_tokens=owner.model_info().max_model_len - 64, ignore_eos=True,
                                  request_id=request_id)
            first = next(stream)
            self.assertEqual(first.request_id, request_id)
            self.assertFalse(anyone.abort(request_id, metadata=[("authorization", f"Bearer {OTHER_KEY}")]))
            self.assertTrue(anyone.abort(request_id, metadata=[("authorization", f"Bearer {KEY}")]))
            rest = list(stream)
            self.assertEqual(rest[-1].finish_reason if rest else first.finish_reason, "abort")

    def test_async_client_metadata(self):
        async def run():
            async with AsyncClient(cluster.address, tls_ca=cluster.ca_file, timeout=120,
                                   metadata={"authorization": f"Bearer {KEY}"}) as c:
                r = await c.generate(PROMPT, max_tokens=16, temperature=0)
                with self.assertRaises(BatonError) as e:
                    await c.tokenize(PROMPT, metadata={"authorization": "Bearer wrong-key"})
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            async with AsyncClient(cluster.address, tls_ca=cluster.ca_file, timeout=120) as c:
                deltas = [d async for d in c.stream(PROMPT, max_tokens=16, temperature=0,
                                                    metadata=[("authorization", f"Bearer {KEY}")])]
            async with AsyncClient(cluster.address, tls_ca=cluster.ca_file, api_key=KEY, timeout=30) as c:
                with self.assertRaisesRegex(ValueError, "api_key"):
                    await c.model_info(metadata={"authorization": f"Bearer {KEY}"})
            return r, deltas

        local = local_generate(PROMPT, "--max-tokens", "16", "--temperature", "0")
        with without_env_key():
            r, deltas = asyncio.run(run())
        self.assertEqual(r.token_ids, local["token_ids"])
        self.assertEqual([t for d in deltas for t in d.token_ids], local["token_ids"])


if __name__ == "__main__":
    unittest.main()
