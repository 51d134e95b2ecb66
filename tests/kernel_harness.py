"""A real Jupyter kernel driven through jupyter_client, acting as a widget frontend."""

import json
import os
import queue
import threading
import time

from jupyter_client.manager import KernelManager

# Registers "endless", a model that never ends by itself, in a kernel (format with tiny=).
# The tiny random model's text reaches end-of-sequence, and at fused-layer speed it can
# finish before a test clicks Stop.
ENDLESS = """
import mlx_notebook
from pathlib import Path
from mlx_lm.utils import load_tokenizer
from mlx_notebook.testing import looping_model
tok = load_tokenizer(Path({tiny!r}))
mlx_notebook.Engine.default().register_model("endless", looping_model(tok, " and on", 0.01), tok)
"""


class Harness:
    """Starts a kernel, records widget state from iopub, clicks buttons by comm message."""

    def __init__(self, startup_timeout=60):
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=startup_timeout)
        self.state = {}  # comm_id -> latest widget state
        self.updates = []  # (time, comm_id, changed state)
        self.live_msgs = []  # (comm_id, kind, bytes): what each live view was sent
        self._blocks = {}  # (comm_id, state key) -> HTML blocks, as the widget's script holds them
        self.outputs = {}  # parent msg_id -> list of iopub messages
        self.displays = {}  # display_id -> latest data bundle (display or update)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while not self._stop.is_set():
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            except Exception:
                return
            kind, content = msg["msg_type"], msg["content"]
            parent = msg.get("parent_header", {}).get("msg_id")
            with self._lock:
                self.outputs.setdefault(parent, []).append(msg)
                if kind in ("display_data", "update_display_data"):
                    did = content.get("transient", {}).get("display_id")
                    if did:
                        self.displays[did] = content["data"]
                if kind == "comm_open" and content.get("target_name") == "jupyter.widget":
                    state = dict(content["data"].get("state", {}))
                    if state.get("kind") in ("live", "panel"):  # a view's HTML comes as deltas
                        self._blocks[(content["comm_id"], "value")] = list(state["initial"])
                        state["value"] = "".join(state.get("initial", []))
                    self.state[content["comm_id"]] = state
                elif kind == "comm_msg" and content["data"].get("method") == "update":
                    cid = content["comm_id"]
                    self.state.setdefault(cid, {}).update(content["data"]["state"])
                    self.updates.append((time.monotonic(), cid, content["data"]["state"]))
                elif kind == "comm_msg" and content["data"].get("method") == "custom":
                    cid, msg = content["comm_id"], content["data"].get("content") or {}
                    if (cid, "value") in self._blocks:
                        self._live(cid, msg, "value")
                    elif msg.get("type") == "live":  # the chat window's streaming reply
                        self._live(cid, msg, "live")

    def _live(self, cid, msg, key):
        """Fold a message to a browser's copy of HTML blocks as its script does (``copy.js``)
        into the widget's state under ``key``."""
        from mlx_notebook.notebook.live.delta import apply

        self.live_msgs.append((cid, msg.get("kind"), len(json.dumps(msg))))
        blocks = self._blocks.get((cid, key), [])
        if msg.get("kind") == "full":
            blocks = list(msg["blocks"])
        elif msg.get("kind") == "delta":
            blocks = apply(blocks, msg["ops"], msg["count"])
        else:
            return
        self._blocks[(cid, key)] = blocks
        value = "".join(blocks)
        self.state.setdefault(cid, {})[key] = value
        self.updates.append((time.monotonic(), cid, {key: value}))

    def views(self):
        """Comm ids of the live views (generation, table, comparison) opened so far."""
        return self.widgets("AnyModel", kind="live")

    def execute(self, code, timeout=60, wait=True):
        msg_id = self.kc.execute(code)
        if not wait:
            return msg_id
        return self.reply(msg_id, timeout)

    def reply(self, msg_id, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no execute_reply for {msg_id} within {timeout} s")
            try:
                msg = self.kc.get_shell_msg(timeout=min(left, 1))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    def output(self, code, timeout=30, quiet=False):
        """Run ``code``; return (reply content, the text it produced).

        Unless ``quiet`` (the code prints nothing), wait up to ``timeout`` for text.
        """
        msg_id = self.execute(code, wait=False)
        reply = self.reply(msg_id, timeout)
        self.idle(msg_id, timeout)
        # ipykernel 7 flushes stdout from its IOPub thread: a stream message can come
        # after the idle status, seconds after on a busy machine.
        deadline = time.monotonic() + (0 if quiet else timeout)
        while not self.texts(msg_id) and time.monotonic() < deadline:
            time.sleep(0.02)
        return reply, self.texts(msg_id)

    def started(self, msg_id, timeout=30):
        """Wait until the kernel began executing ``msg_id`` (its execute_input arrived)."""

        def seen():
            with self._lock:
                return any(m["msg_type"] == "execute_input" for m in self.outputs.get(msg_id, []))

        self.wait_for(f"execution of {msg_id} started", seen, timeout)

    def idle(self, msg_id, timeout=30):
        """Wait for the kernel's idle status for ``msg_id``: its outputs have all been sent.

        iopub and shell are separate channels, so outputs may arrive after the reply.
        """

        def seen():
            with self._lock:
                msgs = list(self.outputs.get(msg_id, []))
            return any(
                m["msg_type"] == "status" and m["content"].get("execution_state") == "idle"
                for m in msgs
            )

        self.wait_for(f"idle after {msg_id}", seen, timeout)

    def texts(self, msg_id):
        """stdout/stderr text, results and errors produced by one execution."""
        out = []
        with self._lock:
            msgs = list(self.outputs.get(msg_id, []))
        for m in msgs:
            c = m["content"]
            if m["msg_type"] == "stream":
                out.append(c["text"])
            elif m["msg_type"] in ("execute_result", "display_data"):
                out.append(c["data"].get("text/plain", ""))
            elif m["msg_type"] == "error":
                out.append("\n".join(c["traceback"]))
        return "".join(out)

    def display_ids(self, msg_id):
        """Display ids of the outputs one execution created."""
        with self._lock:
            msgs = list(self.outputs.get(msg_id, []))
        ids = [m["content"].get("transient", {}).get("display_id") for m in msgs]
        return [i for m, i in zip(msgs, ids) if m["msg_type"] == "display_data" and i is not None]

    def final_output(self, msg_id):
        """The latest bundle of the execution's first display, once it has no widget left."""
        ids = self.display_ids(msg_id)
        if not ids:
            return None
        with self._lock:
            data = self.displays.get(ids[0])
        if data and "application/vnd.jupyter.widget-view+json" not in data:
            return data
        return None

    def widgets(self, model_name, **match):
        with self._lock:
            return [
                cid
                for cid, st in self.state.items()
                if st.get("_model_name") == model_name
                and all(st.get(k) == v for k, v in match.items())
            ]

    def value(self, cid, key):
        with self._lock:
            return self.state.get(cid, {}).get(key)

    def wait_for(self, what, predicate, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            time.sleep(0.02)
        raise TimeoutError(f"timed out after {timeout} s waiting for: {what}")

    def new_view(self, before, timeout=30):
        """``(view, view)``: a live view opened since ``before`` (its HTML, and its Stop)."""

        def found():
            views = [c for c in self.views() if c not in before]
            return (views[0], views[0]) if views else None

        return self.wait_for("a live view", found, timeout)

    def click(self, cid, button="stop"):
        """What a browser sends when a button is clicked (a live view's: which one)."""
        content = {"event": "click", "button": button}
        msg = self.kc.session.msg(
            "comm_msg", {"comm_id": cid, "data": {"method": "custom", "content": content}}
        )
        self.kc.shell_channel.send(msg)

    def custom(self, cid, content):
        """What a widget's own script sends (``model.send(content)`` in anywidget)."""
        msg = self.kc.session.msg(
            "comm_msg", {"comm_id": cid, "data": {"method": "custom", "content": content}}
        )
        self.kc.shell_channel.send(msg)

    def interrupt(self):
        self.km.interrupt_kernel()

    def close(self):
        self._stop.set()
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)
