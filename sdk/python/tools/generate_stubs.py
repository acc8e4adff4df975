#!/usr/bin/python3
"""Generates baton_client/_proto/api_pb2.py and api_pb2_grpc.py from proto/baton/v1/api.proto.

Uses Debian's protoc (protobuf-compiler) and /usr/bin/grpc_python_plugin (protobuf-compiler-grpc),
never python3-grpc-tools (Debian's is far older than its grpcio). The gRPC stub's absolute import
(`from baton.v1 import api_pb2`) becomes a relative one, so the package needs no top-level `baton`.
The descriptors protoc 3.21 leaves in globals() are reached through `_globals[...]`, as protoc 3.22+
writes them itself, so that pyflakes reads the module as clean (no undefined names).

    generate_stubs.py            rewrite the committed files
    generate_stubs.py --check    exit 1 (with a diff) when the committed files are stale
"""
import argparse
import difflib
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_PROTO = HERE.parent / "baton_client" / "_proto"
DEFAULT_PROTO_ROOT = HERE.parents[2] / "proto"
NAMES = ("api_pb2.py", "api_pb2_grpc.py")


def generate(proto_root: pathlib.Path, protoc: str, plugin: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([protoc, f"--proto_path={proto_root}", f"--python_out={out}", f"--grpc_python_out={out}",
                        f"--plugin=protoc-gen-grpc_python={plugin}", "baton/v1/api.proto"], check=True)
        files = {name: (pathlib.Path(out) / "baton" / "v1" / name).read_text() for name in NAMES}
    files["api_pb2_grpc.py"] = files["api_pb2_grpc.py"].replace("from baton.v1 import api_pb2", "from . import api_pb2")
    files["api_pb2.py"] = globals_by_name(files["api_pb2.py"])
    return files


def globals_by_name(text: str) -> str:
    """`_builder.X(..., globals())` and then `_NAME.field = ...` becomes `_globals = globals()`,
    `_builder.X(..., _globals)` and `_globals['_NAME'].field = ...`: the same objects."""
    if "_globals = globals()" in text:  # a protoc that writes it so already
        return text
    text = text.replace("\n_builder.BuildMessageAndEnumDescriptors(",
                        "\n_globals = globals()\n_builder.BuildMessageAndEnumDescriptors(", 1)
    text = re.sub(r"^(_builder\.Build\w+\(.*), globals\(\)\)$", r"\1, _globals)", text, flags=re.M)
    return re.sub(r"^(\s+)(_[A-Z][A-Z0-9_]*)(?=[.\[])", r"\1_globals['\2']", text, flags=re.M)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing them")
    ap.add_argument("--proto-root", type=pathlib.Path, default=DEFAULT_PROTO_ROOT)
    ap.add_argument("--protoc", default="/usr/bin/protoc")
    ap.add_argument("--plugin", default="/usr/bin/grpc_python_plugin")
    args = ap.parse_args()
    files = generate(args.proto_root, args.protoc, args.plugin)
    stale = []
    for name, text in files.items():
        path = PACKAGE_PROTO / name
        if args.check:
            old = path.read_text() if path.exists() else ""
            if old != text:
                stale.append(name)
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                           f"committed/{name}", f"generated/{name}"))
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)} (run sdk/python/tools/generate_stubs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
