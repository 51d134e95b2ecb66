"""What a stranger's bare install must do: run in a virtualenv holding only the built wheel.

The bundled default model generates; a server model streams from a real mlx_lm.server
(a tiny model on a free loopback port, torn down after); a schema comes back as a value;
`score` gives per-token log-probabilities. Each check prints one line; any failure exits 1.

Usage: python scripts/smoke.py   (from any folder: it must not import the checkout)
"""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import mlx_notebook as mn  # noqa: E402


def check(name: str, ok: bool, detail: str) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        sys.exit(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server(model_dir: str):
    port = free_port()
    hub = tempfile.mkdtemp(prefix="smoke-hub-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm.server", "--model", model_dir, "--host", "127.0.0.1",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        env=dict(os.environ, HF_HUB_CACHE=hub),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode()[-2000:])
        try:
            urllib.request.urlopen(f"{base}/models", timeout=2)
            return base, proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.2)


def main() -> int:
    where = os.path.dirname(mn.__file__)
    check("installed", "site-packages" in where, where)
    r = mn.generate("Name a colour.", max_tokens=12, temperature=0)
    check(
        "default model",
        r.finish_reason in ("stop", "length") and r.text.strip() != "",
        repr(r.text),
    )
    res = mn.generate("Pick one.", schema=["red", "green", "blue"], max_tokens=8, temperature=0)
    check("schema", res.value in ("red", "green", "blue"), repr(res.value))
    table = mn.score("The sky is blue.")
    check("score", len(table) > 0 and table.mean_logprob < 0, f"{len(table)} tokens")
    from mlx_notebook.testing import build_tiny_model

    tiny = str(build_tiny_model(tempfile.mkdtemp(prefix="smoke-tiny-")))
    base, proc = server(tiny)
    try:
        got = mn.generate("Hello", model=base, max_tokens=6, chat=False, temperature=0)
        check(
            "server model",
            got.finish_reason in ("stop", "length") and got.stats.generation_tokens > 0,
            f"{got.finish_reason}, {got.stats.generation_tokens} tokens from {base}",
        )
    finally:
        proc.kill()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
