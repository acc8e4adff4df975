"""What the Python SDK tests share: a live `baton up --port 0` cluster started as a real process
(its ready line awaited with a deadline, stopped with SIGTERM at the end) and the local reference,
a `baton generate --model ... --json` process (one colocated engine, no router).

Paths come from the environment ctest sets: BATON_CLI, BATON_BINARY_DIR, BATON_SOURCE_DIR."""
import json
import os
import selectors
import signal
import subprocess
import tempfile
import time

CLI = os.environ["BATON_CLI"]
BINARY_DIR = os.environ["BATON_BINARY_DIR"]
FAMILY = os.path.join(os.environ["BATON_SOURCE_DIR"], "models", "baton-tiny-code")
READY = " ready on "


class Cluster:
    """`baton up` with `extra_args` (e.g. --tls, --api-keys-file FILE); with --tls, `ca_file` is
    the CA certificate clients verify the router with."""

    def __init__(self, start_timeout_s: float = 180.0, extra_args=()):
        self.log = tempfile.TemporaryFile()  # baton up's stderr (progress, the nodes' failures)
        self.log_dir = tempfile.TemporaryDirectory(prefix="baton-sdk-py-")
        self.ca_file = os.path.join(self.log_dir.name, "ca.pem")
        self.process = subprocess.Popen(
            [CLI, "up", "--port", "0", "--kv-cache-memory", "0.125", "--bin-dir", BINARY_DIR,
             "--log-dir", self.log_dir.name, *extra_args],
            stdout=subprocess.PIPE, stderr=self.log)
        try:
            self.address = self._await_ready(start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _await_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(self.process.stdout, selectors.EVENT_READ)
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"baton up printed no ready line in {timeout_s} s: {self.stderr_tail()}")
            if not sel.select(left):
                continue
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"baton up exited ({self.process.wait()}) before ready: {self.stderr_tail()}")
            buf += chunk
            text = buf.decode(errors="replace")
            if READY in text and "\n" in text[text.index(READY):]:
                # "baton up: router ready on HOST:PORT (1 prefill, 1 decode; ...)"
                return text[text.index(READY) + len(READY):].split()[0]

    def stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.log.close()
        if not os.environ.get("BATON_KEEP_LOGS"):  # set it to look at the nodes' logs after a failure
            self.log_dir.cleanup()
        return self.process.returncode


def local_generate(prompt: str, *flags: str) -> dict:
    """`baton generate --model <family>/target --json --prompt PROMPT FLAGS...`: its JSON object."""
    out = subprocess.run([CLI, "generate", "--model", os.path.join(FAMILY, "target"), "--json", "--prompt", prompt,
                          *flags], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def endpoint_generate(address: str, prompt: str, *flags: str) -> dict:
    """`baton generate --endpoint ADDRESS --json`: the CLI's own client through the same router."""
    out = subprocess.run([CLI, "generate", "--endpoint", address, "--json", "--prompt", prompt, *flags],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)
