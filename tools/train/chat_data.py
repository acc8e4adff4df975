"""Chat data of the bundled model family: docstring -> function pairs from its corpus; the chat template.

What it is for
  train_chat.py (the `chat` stage of build_family.py) tunes the target on conversations made here;
  on its own it prints the pairs of a split, to look at them:
      /usr/bin/python3 tools/train/chat_data.py --work build/family [--split valid] [--show 5]

  TEMPLATE is the chat template written into target/tokenizer_config.json. No new tokens (the
  vocabulary, the heads, EAGLE-3's d2t map and the MTP's copied embedding stay valid): plain-text
  role lines the BPE already has ("#", " user" / " system" / " ass" "istant"), `<|endoftext|>` as
  BOS and after every assistant turn (so generation stops there, as a file ends in the corpus):
      <|endoftext|># system\\n{system}\\n# user\\n{request}\\n# assistant\\n{code}\\n<|endoftext|># user\\n...
  render() is the same template in Python (what training tokenizes); test_chat.py checks that
  Baton's Jinja renderer, @huggingface/jinja and render() give the same text.

  Pairs (file_pairs, class Pairs): every top-level function (`def` / `async def`, with its decorators) of a
  corpus split whose docstring has a usable first paragraph, found with `ast`. The request (user
  turn) is that paragraph on one line, in one of three wordings picked by a hash of the file and
  function name: as written ("Return the n-th ..."), as a request ("Write a function that returns
  the n-th ..." when it starts with a known imperative verb) or naming the function ("Write a
  Python function `fib`. Return the n-th ..."). The answer (assistant turn) is the function's source
  exactly as in the file, docstring included: it is the code the target and the heads were
  trained on, so the tune teaches the turn format and when to stop rather than a new style of
  code, and a docstring restating the request is what the corpus does. Methods are left out (their
  source depends on their class); so are pairs that would not fit a training window, and
  duplicates (same request or same answer; the first in path order is kept).
  Conversations (conversation): one or two pairs, sometimes after a system line from SYSTEMS,
  tokenized block by block with a mask of the tokens the loss is on (each answer and the
  `\\n<|endoftext|>` ending it); the blocks' tokens are exactly the tokens of the rendered text
  (checked for every pair when they are loaded).

What it must not do
  Read anything but WORK/corpus and WORK/tokenizer; use the validation split for training pairs
  (valid pairs come from valid files only); depend on anything but the corpus and the seed (no
  set or dict order, no wall-clock); add tokens or change the template without updating render().
"""

import argparse
import ast
import hashlib
import json
import os

import numpy as np

import corpus
import tokenizer_bpe

EOT = tokenizer_bpe.EOT
ROLES = ("system", "user", "assistant")  # the tune's chats
TEMPLATE_ROLES = ROLES + ("tool",)      # what TEMPLATE renders
# The Jinja source stored as tokenizer_config.json's "chat_template". Every tag trims the whitespace
# before it, so the text is the same with or without trim_blocks / lstrip_blocks. Tools (one JSON
# line each under "# tools"), an assistant's calls (hermes-style <tool_call> lines) and "tool"
# messages render too, for the OpenAI API's tool calling; the tune's chats have none of them.
TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if tools %}\n"
    "    {{- '# tools\\n' }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- tool | tojson }}\n"
    "        {{- '\\n' }}\n"
    "    {%- endfor %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}\n"
    "        {{- raise_exception('baton-tiny-code chats know the roles system, user, assistant and tool') }}\n"
    "    {%- endif %}\n"
    "    {{- '# ' + message['role'] + '\\n' }}\n"
    "    {%- if message['content'] %}\n"
    "        {{- message['content'] | trim }}\n"
    "    {%- endif %}\n"
    "    {%- for call in message['tool_calls'] or [] %}\n"
    "        {%- if message['content'] or not loop.first %}\n"
    "            {{- '\\n' }}\n"
    "        {%- endif %}\n"
    "        {%- set function = call['function'] if call['function'] is defined else call %}\n"
    "        {{- '<tool_call>{\"name\": ' + function['name'] | tojson + ', \"arguments\": ' }}\n"
    "        {%- if function['arguments'] is string %}\n"
    "            {{- function['arguments'] }}\n"
    "        {%- else %}\n"
    "            {{- function['arguments'] | tojson }}\n"
    "        {%- endif %}\n"
    "        {{- '}</tool_call>' }}\n"
    "    {%- endfor %}\n"
    "    {{- '\\n' }}\n"
    "    {%- if message['role'] == 'assistant' %}\n"
    "        {{- eos_token }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '# assistant\\n' }}\n"
    "{%- endif %}"
)
SYSTEMS = ("You write Python code.", "You are a Python programming assistant.",
           "Answer with one Python function.", "You are a helpful assistant.")
# First words of docstrings that read as an imperative ("Return ...") -> third person ("returns ...").
VERBS = ("add", "append", "apply", "build", "calculate", "call", "check", "clear", "close", "collect",
         "compare", "compile", "compute", "construct", "convert", "copy", "count", "create", "decide",
         "decode", "delete", "determine", "dump", "emit", "encode", "ensure", "escape", "evaluate", "extract",
         "fetch", "filter", "find", "format", "generate", "get", "guess", "handle", "initialize", "insert",
         "install", "iterate", "join", "list", "load", "look", "make", "map", "match", "merge", "move",
         "normalize", "open", "pack", "parse", "print", "process", "produce", "put", "quote", "raise", "read",
         "register", "remove", "rename", "replace", "reset", "resolve", "restore", "return", "run", "save",
         "search", "send", "set", "show", "sort", "split", "start", "strip", "test", "transform", "translate",
         "try", "turn", "unpack", "unquote", "update", "validate", "walk", "wrap", "write", "yield")
MIN_WORDS, MAX_REQUEST_CHARS = 3, 400


def tojson(value):
    """Jinja's tojson as transformers defines it."""
    return json.dumps(value, ensure_ascii=False)


def render(messages, add_generation_prompt=False, tools=None):
    """The text TEMPLATE renders (bos_token = eos_token = <|endoftext|>)."""
    out = [EOT]
    if tools:
        out.append("# tools\n")
        out.extend(tojson(tool) + "\n" for tool in tools)
    for m in messages:
        if m["role"] not in TEMPLATE_ROLES:
            raise ValueError("baton-tiny-code chats know the roles system, user, assistant and tool")
        content = m.get("content")
        out.append("# " + m["role"] + "\n" + (content.strip() if content else ""))
        for i, call in enumerate(m.get("tool_calls") or []):
            if content or i > 0:
                out.append("\n")
            function = call.get("function", call)
            arguments = function["arguments"]
            out.append('<tool_call>{"name": ' + tojson(function["name"]) + ', "arguments": ' +
                       (arguments if isinstance(arguments, str) else tojson(arguments)) + "}</tool_call>")
        out.append("\n")
        if m["role"] == "assistant":
            out.append(EOT)
    if add_generation_prompt:
        out.append("# assistant\n")
    return "".join(out)


def third_person(verb):
    if verb.endswith(("s", "sh", "ch", "x", "z")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def request_text(rel, name, para):
    """The user turn for a function `name` of file `rel` whose docstring starts with `para`."""
    form = int.from_bytes(hashlib.sha256(f"baton-chat:{rel}:{name}".encode()).digest()[:4], "little") % 3
    first, _, rest = para.partition(" ")
    if form == 1 and first.lower() in VERBS and first[:1].isupper() and rest:
        return f"Write a function that {third_person(first.lower())} {rest}"
    if form == 2:
        return f"Write a Python function `{name}`. {para}"
    return para


def first_paragraph(doc):
    lines = []
    for line in doc.strip().split("\n"):
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(" ".join(lines).split())


def file_pairs(rel, text):
    """(name, request, source) of the top-level functions of one file with a usable docstring."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.split("\n")  # as ast counts lines (str.splitlines also splits at form feeds)
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc:
            continue
        para = first_paragraph(doc)
        if (len(para.split()) < MIN_WORDS or len(para) > MAX_REQUEST_CHARS or para.startswith(node.name + "(")
                or len(node.body) < 2):  # a docstring-only stub teaches nothing
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        source = "\n".join(lines[start - 1:node.end_lineno]).rstrip()
        out.append((node.name, request_text(rel, node.name, para), source))
    return out


def split_files(work, split):
    """[(relative path, text)] of a corpus split, in the corpus's order."""
    d = os.path.join(work, "corpus")
    with open(os.path.join(d, "manifest.json")) as f:
        files = json.load(f)["splits"][split]["files"]
    with open(os.path.join(d, split + ".txt"), encoding="utf-8", newline="") as f:
        texts = f.read().split(corpus.FILE_SEPARATOR)[1:]
    if len(texts) != len(files):
        raise SystemExit(f"{d}/{split}.txt holds {len(texts)} documents, the manifest {len(files)}")
    return list(zip(files, texts))


class Pairs:
    """The tokenized pairs of one split: blocks[i] = (user tokens, assistant header, answer tokens)."""

    def __init__(self, work, split, seq_len):
        self.tok = tokenizer_bpe.load(os.path.join(work, "tokenizer"))
        self.header = self.tok.encode("# assistant\n")
        self.systems = [self.tok.encode(f"# system\n{s}\n") for s in SYSTEMS]
        longest_system = max(len(s) for s in self.systems)
        self.items, self.blocks, seen = [], [], set()
        self.dropped = {"too long": 0, "duplicate": 0}
        for rel, text in split_files(work, split):
            for name, request, source in file_pairs(rel, text):
                if request in seen or source in seen:
                    self.dropped["duplicate"] += 1
                    continue
                seen.update((request, source))
                user = self.tok.encode(f"# user\n{request}\n")
                answer = self.tok.encode(source + "\n") + [0]
                if 1 + longest_system + len(user) + len(self.header) + len(answer) > seq_len:
                    self.dropped["too long"] += 1
                    continue
                self.items.append({"file": rel, "name": name, "user": request, "assistant": source})
                self.blocks.append((user, answer))
        for i in range(len(self.items)):  # the blocks must be exactly the rendered text's tokens
            ids, _ = self.conversation([i], system=0)
            want = self.tok.encode(render(self.messages([i], system=0)))
            if ids != want:
                raise SystemExit(f"chat_data: pair {self.items[i]['file']}:{self.items[i]['name']} tokenizes "
                                 "differently block by block than rendered whole")

    def __len__(self):
        return len(self.items)

    def messages(self, indices, system=None):
        out = [{"role": "system", "content": SYSTEMS[system]}] if system is not None else []
        for i in indices:
            out += [{"role": "user", "content": self.items[i]["user"]},
                    {"role": "assistant", "content": self.items[i]["assistant"]}]
        return out

    def conversation(self, indices, system=None):
        """(token ids, loss mask) of BOS [+ system] + (user, header, answer) per pair."""
        ids, mask = [0], [False]
        if system is not None:
            ids += self.systems[system]
            mask += [False] * len(self.systems[system])
        for i in indices:
            user, answer = self.blocks[i]
            ids += user + self.header + answer
            mask += [False] * (len(user) + len(self.header)) + [True] * len(answer)
        return ids, mask


def chat_batch(pairs, step, rows, seq_len, seed, system_fraction=0.2, two_turn_fraction=0.25):
    """(ids [rows, seq_len] int64, mask [rows, seq_len] bool): conversations packed into rows, each
    row starting with a conversation's BOS, zero-padded (mask False) after the last that fits.
    Drawn with numpy's RandomState(seed, step) only, as data.train_batch."""
    rng = np.random.RandomState((seed * 1_000_003 + step) % (2 ** 32))
    ids = np.zeros((rows, seq_len), dtype=np.int64)
    mask = np.zeros((rows, seq_len), dtype=bool)
    for r in range(rows):
        pos = 0
        while True:
            system = int(rng.randint(len(SYSTEMS))) if rng.random_sample() < system_fraction else None
            picks = [int(rng.randint(len(pairs)))]
            if rng.random_sample() < two_turn_fraction:
                picks.append(int(rng.randint(len(pairs))))
            conv, m = pairs.conversation(picks, system)
            if len(conv) > seq_len - pos and len(picks) == 2 and pos == 0:
                conv, m = pairs.conversation(picks[:1], system)
            if len(conv) > seq_len - pos:
                break
            ids[r, pos:pos + len(conv)] = conv
            mask[r, pos:pos + len(conv)] = m
            pos += len(conv)
    return ids, mask


def main(argv=None):
    ap = argparse.ArgumentParser(description="Print the chat pairs of a corpus split.")
    ap.add_argument("--work", default="build/family")
    ap.add_argument("--split", default="train", choices=("train", "valid"))
    ap.add_argument("--seq-len", type=int, default=513)
    ap.add_argument("--show", type=int, default=3)
    a = ap.parse_args(argv)
    pairs = Pairs(a.work, a.split, a.seq_len)
    lengths = [len(pairs.conversation([i])[0]) for i in range(len(pairs))]
    print(f"{a.split}: {len(pairs)} pairs (dropped {pairs.dropped}); tokens per conversation: "
          f"median {int(np.median(lengths))}, max {max(lengths)}")
    for i in range(min(a.show, len(pairs))):
        print("-" * 60)
        print(render(pairs.messages([i]), add_generation_prompt=False))


if __name__ == "__main__":
    main()
