"""A JupyterLab server on loopback and a headless Debian Chromium, always torn down."""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = os.environ.get("MLX_NOTEBOOK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
]


class StepTimeout(AssertionError):
    """A named end-to-end step did not finish in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def lab_server(root: Path, timeout: float = 120):
    """Start JupyterLab on a free loopback port with a token; yield its base URL."""
    token = secrets.token_hex(16)
    state = root.parent / (root.name + "-jupyter")
    state.mkdir(exist_ok=True)
    port = free_port()
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(state / "runtime"),
        JUPYTER_CONFIG_DIR=str(state / "config"),
        HF_HUB_OFFLINE="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.workspaces_dir={state / 'workspaces'}",
        f"--LabApp.user_settings_dir={state / 'settings'}",
        "--LabApp.news_url=None",
        "--ServerApp.allow_root=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    log = open(state / "server.log", "w")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited early; log:\n{(state / 'server.log').read_text()}"
                )
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise StepTimeout(
                        f"step 'start JupyterLab' stalled after {timeout} s"
                    ) from None
                time.sleep(0.3)
        yield base, token
    finally:
        _kill_group(proc)
        for pid in leftovers(state):  # kernels run in sessions of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        shutil.rmtree(state / "runtime", ignore_errors=True)


def leftovers(marker) -> list[int]:
    """PIDs of live processes whose command line mentions ``marker`` (a private dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if str(marker) in cmd and ") Z " not in stat:
            found.append(int(entry.name))
    return found


def _kill_group(proc):
    # The server and its kernels share the session we started: end them all.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextmanager
def browser():
    """Headless Debian Chromium driven by Playwright (no Playwright browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


def step(name: str, fn, timeout: float = 30, interval: float = 0.2):
    """Poll ``fn`` until truthy; fail naming the step that stalled."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            out = fn()
            if out:
                return out
        except Exception as exc:  # the page may be mid-render
            last = exc
        time.sleep(interval)
    raise StepTimeout(f"step '{name}' stalled after {timeout} s" + (f" ({last})" if last else ""))
