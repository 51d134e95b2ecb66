"""Splices between renders, checked against a replay of them (here and in the browser's code)."""

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from mlx_notebook.notebook.live.delta import apply, diff, splice

ALPHABET = ["a", "b", " ", "<", "é", "😀", "\n", "中"]


def _edits(rng, n):
    """A sequence of block lists as a view makes them: growing, edited, appearing, going."""
    blocks = ["", "hdr 0", "", "text"]
    out = [list(blocks)]
    for step in range(n):
        i = rng.randrange(len(blocks))
        b = blocks[i]
        at = rng.randrange(len(b) + 1)
        cut = rng.randrange(len(b) - at + 1)
        put = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(4)))
        blocks[i] = b[:at] + put + b[at + cut :]
        blocks[3] += rng.choice(ALPHABET)  # the text grows at its end
        if step % 17 == 5:
            blocks = blocks + ["extra"] if len(blocks) == 4 else blocks[:4]
        out.append(list(blocks))
    return out


def test_splice_is_the_changed_middle_in_utf16_units():
    assert splice("\udc80a", "\udc80b") == (1, 1, "b")  # a lone surrogate is one unit
    assert splice("abc", "abc") is None
    assert splice("hello", "hello world") == (5, 0, " world")
    assert splice("a😀b", "a😀xb") == (3, 0, "x")  # 😀 is two units in the browser
    assert splice("aXa", "aYa") == (1, 1, "Y")
    assert splice("aa", "aaa") == (2, 0, "a")  # prefix and suffix never overlap


def test_replaying_diffs_rebuilds_every_render():
    rng = random.Random(7)
    renders = _edits(rng, 300)
    copy = renders[0]
    for old, new in zip(renders, renders[1:]):
        copy = apply(copy, diff(old, new), len(new))
        assert copy == new


def test_a_growing_text_sends_what_it_adds():
    text, old, sent = "", ["<p>", ""], 0
    for i in range(500):
        text += f" word{i}"
        new = [f"hdr {i} tokens", f"<p>{text}</p>"]
        sent += sum(len(put) for *_, put in diff(old, new))
        old = new
    assert sent < len(text) + 500 * 4  # the new word, and the header's changed digits


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_browser_copy_applies_the_same_messages(tmp_path):
    # copy.js's `receive` (run by node; the views' scripts start with it)
    # must rebuild what Python meant.
    rng = random.Random(11)
    renders = _edits(rng, 200)
    msgs = [{"kind": "full", "seq": 1, "blocks": renders[0]}]
    for seq, (old, new) in enumerate(zip(renders, renders[1:]), start=2):
        msgs.append({"kind": "delta", "seq": seq, "ops": diff(old, new), "count": len(new)})
    js = Path(__file__).parents[3] / "mlx_notebook/notebook/live/copy.js"
    runner = tmp_path / "run.mjs"
    runner.write_text(
        f"import {{ adopt, newCopy, receive }} from {json.dumps(js.as_uri())};\n"
        "const sent = [];\n"
        "const model = { get: () => undefined, send: (m) => sent.push(m) };\n"
        "const c = newCopy(model);\n"
        "for (const m of JSON.parse(process.argv[2])) {\n"
        "  if (m.kind === 'adopt') adopt(c, m.blocks, m.seq); else receive(c, model, m);\n"
        "}\n"
        "process.stdout.write(JSON.stringify({ sent, blocks: c.blocks }));\n"
    )

    def run(messages):
        args = ["node", str(runner), json.dumps(messages)]
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout

    got = json.loads(run(msgs))
    assert got["sent"] == [] and got["blocks"] == renders[-1]
    # A copy that missed a message asks for the whole view and ignores deltas until then.
    gap = [msgs[0], msgs[2], msgs[3]]
    got = json.loads(run(gap))
    assert got["sent"] == [{"kind": "sync"}] and got["blocks"] == renders[0]
    # It asks again every 20 dropped deltas; the widget's saved state at a view's end
    # (`initial` as of `initial_seq`) brings it up to date, and older deltas then do nothing.
    end = len(renders)
    behind = [msgs[0], *msgs[2:45], {"kind": "adopt", "blocks": renders[-1], "seq": end}]
    got = json.loads(run(behind + msgs[40:45]))
    assert got["sent"] == [{"kind": "sync"}] * 3 and got["blocks"] == renders[-1]
