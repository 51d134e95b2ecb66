"""The top-level API from plain Python: no IPython, no kernel."""

import json
import subprocess
import sys

STREAM = """
import json, sys
import mlx_notebook as mn
tiny = sys.argv[1]
h = mn.stream("Once upon a time", model=tiny, max_tokens=12, chat=False, temperature=0)
pieces = [e.text for e in h.job.events() if type(e).__name__ == "Token"]
blocking = mn.generate("Once upon a time", model=tiny, max_tokens=12, chat=False, temperature=0)
print(json.dumps({
    "same": h.text == blocking.text == "".join(pieces), "tokens": len(pieces),
    "done": h.done, "reason": h.finish_reason, "last": mn.last() is h,
    "html": "<div" in h._repr_html_(), "ipython": "IPython" in sys.modules,
}))
"""


def test_stream_in_plain_python_works_as_the_blocking_api(tiny_dir):
    out = subprocess.run(
        [sys.executable, "-c", STREAM, tiny_dir], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got == {
        "same": True, "tokens": got["tokens"], "done": True, "reason": got["reason"],
        "last": True, "html": True, "ipython": False,
    } and got["tokens"] > 0 and got["reason"] in ("stop", "length")  # fmt: skip
