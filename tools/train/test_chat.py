"""Checks the family's chat template: one text in chat_data.py, @huggingface/jinja and Baton.

What it is for
      /usr/bin/python3 tools/train/test_chat.py [--family models/baton-tiny-code]
          [--baton build/release/cli/baton] [--work build/family]
  - FAMILY/target/tokenizer_config.json's chat_template is chat_data.TEMPLATE;
  - @huggingface/jinja (tests/tokenizer/reference, the renderer the C++ tests hold Baton's to)
    renders it exactly as chat_data.render() -- the text the chat stage trains on -- for
    CONVERSATIONS and tests/tokenizer/conversations.json, with and without add_generation_prompt,
    and fails exactly where render() fails (roles other than system, user, assistant, tool); a
    conversation is a list of messages or {"messages", "tools"};
  - with --baton: `baton up` on FAMILY/target (its own Jinja renderer and tokenizer) answers
    POST /tokenize for every non-empty conversation (the API refuses an empty one) with exactly
    tokenizer_bpe's ids of render() where render() succeeds and an error where it fails (needs
    WORK/tokenizer, the tokenizer stage's output), and /v1/chat/completions answers one request
    with finish_reason "stop" (the model ends its turn with <|endoftext|>).
  Prints what it compared; exits 1 on any difference.

What it must not do
  Train, or write anything outside a temporary directory; skip a check silently (a missing node
  or reference package is an error, since the template must render alike everywhere).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import chat_data  # noqa: E402
import tokenizer_bpe  # noqa: E402

FIB = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n" \
      "    for _ in range(n):\n        a, b = b, a + b\n    return a"
CONVERSATIONS = [
    [],
    [{"role": "user", "content": "Return the n-th Fibonacci number."}],
    [{"role": "system", "content": "You write Python code."},
     {"role": "user", "content": "Write a function that returns the n-th Fibonacci number."}],
    [{"role": "user", "content": "Return the n-th Fibonacci number."}, {"role": "assistant", "content": FIB},
     {"role": "user", "content": "Now one that returns the factorial of n."}],
    [{"role": "system", "content": "  Answer with one Python function.\n\n"},
     {"role": "user", "content": "\tSplit a path\ninto (head, tail).  \n"},
     {"role": "assistant", "content": "\ndef split(p):\n    return p.rpartition('/')[::2]\n\n"},
     {"role": "user", "content": "Thanks! {{ not a tag }} <|endoftext|> \u00fcnic\u00f6de \U0001F600"},
     {"role": "assistant", "content": "pass"}],
    [{"role": "assistant", "content": "I speak first."}],
    [{"role": "user", "content": "Weather?"}, {"role": "tool", "content": "sunny"}],
    [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
]


def unpack(conversation):
    """(messages, tools) of a conversation: a list of messages, or {"messages", "tools"}."""
    if isinstance(conversation, dict):
        return conversation["messages"], conversation.get("tools")
    return conversation, None


def as_sent(messages):
    """The messages as an OpenAI client sends them: a call's arguments as JSON text."""
    sent = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [dict(c, function=dict(c["function"], arguments=c["function"]["arguments"]
                                                     if isinstance(c["function"]["arguments"], str)
                                                     else json.dumps(c["function"]["arguments"], ensure_ascii=False)))
                               for c in m["tool_calls"]]
        sent.append(m)
    return sent


def python_render(conversation, add_generation_prompt):
    messages, tools = unpack(conversation)
    try:
        return {"text": chat_data.render(messages, add_generation_prompt, tools)}
    except Exception as e:  # any failure: the Jinja renderers must fail too
        return {"error": str(e)}


def check_reference(template, conversations):
    ref = os.path.join(REPO, "tests", "tokenizer", "reference")
    if not os.path.exists(os.path.join(ref, "node_modules", "@huggingface", "jinja", "package.json")):
        raise SystemExit("@huggingface/jinja is missing: "
                         f"npm ci --prefix {os.path.relpath(ref, REPO)} --no-audit --no-fund")
    cases = {"templates": {"baton-tiny-code": template}, "conversations": conversations,
             "variables": {"baton-tiny-code": {"bos_token": chat_data.EOT, "eos_token": chat_data.EOT,
                                               "pad_token": chat_data.EOT}}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
    try:
        out = subprocess.run(["node", os.path.join(ref, "render_reference.js"), f.name], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(f.name)
    bad = 0
    renders = json.loads(out)["renders"]
    for r in renders:
        want = python_render(conversations[r["conversation"]], r["add_generation_prompt"])
        same = ("error" in r and "error" in want) or ("text" in r and r["text"] == want.get("text"))
        if not same:
            bad += 1
            print(f"DIFF conversation {r['conversation']} gen={r['add_generation_prompt']}:\n"
                  f"  @huggingface/jinja {json.dumps(r)}\n  chat_data.render   {json.dumps(want)}")
    print(f"@huggingface/jinja vs chat_data.render: {len(renders)} renders "
          f"({sum('error' in r for r in renders)} expected errors), {bad} differences")
    return bad


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def check_baton(baton, family, work, conversations):
    tok = tokenizer_bpe.load(os.path.join(work, "tokenizer"))
    with tempfile.TemporaryDirectory() as tmp:
        up = subprocess.Popen([baton, "up", "--model", os.path.join(family, "target"), "--port", "0", "--http-port",
                               "0", "--threads", "1", "--kv-cache-memory", "0.05", "--log-dir",
                               os.path.join(tmp, "logs")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
        try:
            api, deadline = None, time.time() + 300
            while api is None and time.time() < deadline:
                line = up.stdout.readline()
                if not line:
                    raise SystemExit("baton up exited before serving")
                m = re.search(r"OpenAI API on (\S+)", line)
                api = m.group(1) if m else None
            base = api[:-len("/v1")]
            bad, checked = 0, 0
            for i, conversation in enumerate(conversations):
                messages, tools = unpack(conversation)
                if not messages:
                    continue  # the API refuses an empty conversation before rendering it
                for gen in (False, True):
                    want = python_render(conversation, gen)
                    request = {"messages": as_sent(messages), "add_generation_prompt": gen}
                    if tools:
                        request["tools"] = tools
                    status, body = post(base + "/tokenize", request)
                    checked += 1
                    if "error" in want:
                        ok = status >= 400
                    else:
                        ok = status == 200 and body.get("tokens") == tok.encode(want["text"])
                    if not ok:
                        bad += 1
                        print(f"DIFF conversation {i} gen={gen}: baton {status} {json.dumps(body)[:300]}\n"
                              f"  want {json.dumps(want)[:300]}")
            print(f"baton /tokenize vs tokenizer_bpe(chat_data.render): {checked} conversations, {bad} differences")
            status, body = post(api + "/chat/completions", {
                "model": "target", "messages": [{"role": "user", "content": "Return the n-th Fibonacci number."}],
                "max_tokens": 200, "temperature": 0})
            reason = body.get("choices", [{}])[0].get("finish_reason") if status == 200 else None
            print(f"baton /v1/chat/completions: HTTP {status}, finish_reason {reason}:\n"
                  + (body["choices"][0]["message"]["content"] if status == 200 else json.dumps(body)))
            return bad + (reason != "stop")
        finally:
            up.send_signal(signal.SIGTERM)
            up.wait(timeout=60)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=os.path.join(REPO, "models", "baton-tiny-code"))
    ap.add_argument("--baton", default=None, help="a baton binary: also check `baton up`'s rendering and answer")
    ap.add_argument("--work", default=os.path.join(REPO, "build", "family"), help="holds tokenizer/ (with --baton)")
    a = ap.parse_args(argv)
    with open(os.path.join(a.family, "target", "tokenizer_config.json")) as f:
        template = json.load(f).get("chat_template")
    bad = 0
    if template != chat_data.TEMPLATE:
        print("target/tokenizer_config.json's chat_template is not chat_data.TEMPLATE")
        bad += 1
    with open(os.path.join(REPO, "tests", "tokenizer", "conversations.json")) as f:
        conversations = CONVERSATIONS + json.load(f)
    bad += check_reference(chat_data.TEMPLATE, conversations)
    if a.baton:
        bad += check_baton(a.baton, a.family, a.work, conversations)
    print("OK" if not bad else f"FAILED ({bad})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
