"""The Python SDK against `baton up --tls --api-keys-file`: Client and AsyncClient reach the router
over TLS (verifying it with the cluster's ca.pem) with a key from the argument or BATON_API_KEY, and
get the local `baton generate` tokens; without the key the router answers UNAUTHENTICATED, and
without TLS the handshake fails (UNAVAILABLE)."""
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


def setUpModule():
    global cluster, keys
    keys = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
    keys.write(f"# the test's key\n{KEY}\n")
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


if __name__ == "__main__":
    unittest.main()
