"""marimo as a user starts it (``marimo edit`` or ``marimo run``), on a free loopback port."""

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from .lab import _kill_group, free_port, spawn


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
    proc, log = spawn(cmd, env, home / "server.log", "marimo",
                      f"http://127.0.0.1:{port}/health", timeout)  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        _kill_group(proc)
        log.close()
