"""marimo as a user starts it (``marimo edit`` or ``marimo run``), on a free loopback port."""

import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from .lab import StepTimeout, _kill_group, free_port


@contextmanager
def marimo_server(notebook: Path, mode: str, theme: str = "light", timeout: float = 120):
    """Serve ``notebook`` with ``marimo MODE`` in ``theme``; yield its base URL."""
    home = notebook.parent / f"marimo-{mode}-{theme}"
    (home / "marimo").mkdir(parents=True, exist_ok=True)
    (home / "marimo" / "marimo.toml").write_text(f'[display]\ntheme = "{theme}"\n')
    port = free_port()
    env = dict(os.environ, XDG_CONFIG_HOME=str(home), HF_HUB_OFFLINE="1")
    cmd = [
        sys.executable, "-m", "marimo", mode, str(notebook), "--headless", "--no-token",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    log = open(home / "server.log", "w")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                out = (home / "server.log").read_text()
                raise RuntimeError(f"marimo exited early; log:\n{out}")
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise StepTimeout(f"step 'start marimo' stalled after {timeout} s") from None
                time.sleep(0.3)
        yield base
    finally:
        _kill_group(proc)
        log.close()
