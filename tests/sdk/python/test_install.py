"""The Python SDK as pip installs it (no cluster): sdk/python installed into a fresh virtual
environment that sees the system's grpcio and protobuf, with no package index, so pip must find
the declared dependencies among them (Debian 12's satisfy the bounds). The installed package has
py.typed (PEP 561), its metadata carries pyproject.toml's bounded dependencies, and it imports
from the environment, not from the source tree."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest

SOURCE = pathlib.Path(os.environ["BATON_SOURCE_DIR"]) / "sdk" / "python"

PROBE = """
import importlib.metadata as md, json, pathlib, baton_client
from baton_client import AsyncClient, Client, SamplingParams
package = pathlib.Path(baton_client.__file__).parent
print(json.dumps({"file": baton_client.__file__, "py_typed": (package / "py.typed").is_file(),
                  "recorded": sorted(str(f) for f in md.files("baton-client") if f.name == "py.typed"),
                  "requires": md.requires("baton-client")}))
"""


def requirement_set(requirements):
    """{"protobuf": {">=4.21", "<5"}, ...} from requirement strings, spacing, order and the
    parentheses older setuptools writes ("protobuf (<5,>=4.21)") aside."""
    out = {}
    for r in requirements:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*\(?([^()]*)\)?\s*", r)
        out[m.group(1).lower()] = {s.replace(" ", "") for s in m.group(2).split(",") if s.strip()}
    return out


class InstallTest(unittest.TestCase):
    def test_installed_package(self):
        with tempfile.TemporaryDirectory(prefix="baton-sdk-py-install-") as tmp:
            tmp = pathlib.Path(tmp)
            # A copy: pip builds in the tree it is given, and the sources stay as they are.
            shutil.copytree(SOURCE, tmp / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_NO_INDEX")}
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", tmp / "env"],
                           check=True, env=env, cwd=tmp)
            python = tmp / "env" / "bin" / "python"
            pip = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                                  "--disable-pip-version-check", "--no-input", tmp / "src"],
                                 capture_output=True, text=True, env=env, cwd=tmp, timeout=180)
            self.assertEqual(pip.returncode, 0, f"pip install failed:\n{pip.stdout}\n{pip.stderr}")
            probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp,
                                   timeout=60)
            self.assertEqual(probe.returncode, 0, probe.stderr)
            got = json.loads(probe.stdout)
        self.assertTrue(pathlib.Path(got["file"]).is_relative_to(tmp / "env"), got["file"])
        self.assertTrue(got["py_typed"], "baton_client/py.typed is not installed")
        self.assertEqual(got["recorded"], ["baton_client/py.typed"])
        with open(SOURCE / "pyproject.toml", "rb") as f:
            declared = requirement_set(tomllib.load(f)["project"]["dependencies"])
        installed = requirement_set(got["requires"])
        self.assertEqual(installed, declared)
        # Both are bounded above: the committed stubs are guaranteed only within protobuf's major
        # version of the protoc that generated them.
        for name in ("protobuf", "grpcio"):
            self.assertTrue(any(s.startswith("<") for s in installed[name]), f"{name} has no upper bound")


if __name__ == "__main__":
    unittest.main()
