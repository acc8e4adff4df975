#!/usr/bin/env bash
# The server component installed into a temporary prefix (cmake --install, as the container image
# is built) finds its bundled files at run time: the model family under PREFIX/models and the
# prompt sets under PREFIX/share/baton/bench-data, with no source-tree path compiled into `baton`.
# A lone copy of the binary names where it looked, and BATON_HOME points it at the files.
#
# usage: install_layout_test.sh CMAKE BUILD_DIR SOURCE_DIR
set -euo pipefail
cmake=$1 build=$2 src=$3
prefix=$(mktemp -d /tmp/baton-install-XXXXXX)
lone=$(mktemp -d /tmp/baton-lone-XXXXXX)
trap 'rm -rf "$prefix" "$lone"' EXIT
fail() { echo "install_layout_test: $*" >&2; exit 1; }

"$cmake" --install "$build" --component server --prefix "$prefix" >/dev/null
test -f "$prefix/models/baton-tiny-code/target/config.json" || fail "no model family under $prefix/models"
test -f "$prefix/share/baton/bench-data/HumanEval.jsonl.gz" || fail "no prompt sets under $prefix/share/baton/bench-data"
for path in "$src/bench/data" "$src/models/baton-tiny-code"; do
  if grep -q -a -F "$path" "$prefix/bin/baton"; then fail "$prefix/bin/baton has $path compiled in"; fi
done

# verify-lossless reads its default prompt sets before it calls the router: with them found it
# gets as far as the (absent) router, whose address the error names.
out=$("$prefix/bin/baton" verify-lossless --endpoint 127.0.0.1:1 --num-prompts 2 2>&1) && fail "no router, yet exit 0"
grep -q "cannot find" <<<"$out" && fail "the installed baton did not find its prompt sets: $out"
grep -q "127.0.0.1:1" <<<"$out" || fail "the error does not name the router: $out"

cp "$prefix/bin/baton" "$lone/baton"
out=$("$lone/baton" verify-lossless --endpoint 127.0.0.1:1 --num-prompts 2 2>&1) && fail "no prompt sets, yet exit 0"
grep -q "cannot find the bundled prompt sets" <<<"$out" || fail "a lone binary must say what it cannot find: $out"
grep -q "BATON_HOME" <<<"$out" || fail "the error must name BATON_HOME: $out"
out=$(BATON_HOME="$prefix" "$lone/baton" verify-lossless --endpoint 127.0.0.1:1 --num-prompts 2 2>&1) || true
grep -q "cannot find" <<<"$out" && fail "BATON_HOME=$prefix did not lead to the prompt sets: $out"
echo "install_layout_test: ok"
