"""A real ``mlx_lm.server`` on a free loopback port, always torn down; and a tiny HTTP
server that misbehaves on purpose (malformed events, silence) for failure tests."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mlx_lm_server(model_dir: str, timeout: float = 120):
    """Start ``python -m mlx_lm.server`` on the model; yield ``(base_url, process)``."""
    port = free_port()
    cmd = [sys.executable, "-m", "mlx_lm.server", "--model", model_dir,
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    import tempfile

    hub = tempfile.mkdtemp(prefix="mlxnb-hub-")  # its /v1/models scans the hub cache
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=hub)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlx_lm.server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("mlx_lm.server did not come up") from None
                time.sleep(0.2)
        yield base, proc
    finally:
        stop(proc)


def stop(proc) -> None:
    """Kill the server's whole process group and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)
    proc.stderr and proc.stderr.close()


@contextmanager
def misbehaving_server(mode: str, bodies: list | None = None, chunks: list | None = None):
    """``mode``: ``"malformed"`` sends a bad event after some text; ``"silent"`` never answers;
    ``"reply:TEXT"`` answers TEXT and stops, whatever was asked; ``"chunks"`` streams
    ``chunks`` (dicts) as they are (request bodies go to ``bodies``)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if bodies is not None:
                bodies.append(json.loads(raw))
            if mode.startswith("reply:") or mode == "chunks":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                delta = {"choices": [{"index": 0, "delta": {"content": mode[6:]}}]}
                end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                for chunk in chunks if mode == "chunks" else (delta, end):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                return
            if mode == "silent":
                time.sleep(30)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            good = b'data: {"choices": [{"index": 0, "delta": {"content": "partial"}}]}\n\n'
            self.wfile.write(good + b"data: {not json\n\n")
            self.wfile.flush()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
