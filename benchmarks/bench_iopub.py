"""Bytes a streaming view sends the notebook front end, per generated token.

Usage: python benchmarks/bench_iopub.py [--tokens 2000] [--delay 0.01] [--hz 20]

A real kernel (jupyter_client, as tests/kernel_harness.py drives one) loads the
extension and runs ``%%generate -m endless -n TOKENS --wait -o h``: a scripted model
that writes " and on" at one token every ``--delay`` seconds and never ends by itself,
on the bundled tokenizer of the tiny test model, so the view path is the real one
and the token count exact. Every iopub message from the cell's start until the
kernel is idle again (and a second after, for the last refresh) is counted as its
JSON (header, parent header, metadata, content) plus binary buffers: what the
kernel sends towards the front end, widget updates and display updates included.
Printed: bytes per token, and that over the text's own UTF-8 bytes per token.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.kernel_harness


def size(msg: dict) -> int:
    """Bytes of one iopub message as JSON, plus its binary buffers."""
    parts = {k: msg.get(k) for k in ("header", "parent_header", "metadata", "content")}
    return len(json.dumps(parts, default=str).encode()) + sum(
        len(b) for b in msg.get("buffers") or []
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--delay", type=float, default=0.01, help="seconds per token")
    ap.add_argument("--hz", type=float, default=None, help="MLXNotebook.refresh_hz (20)")
    args = ap.parse_args()

    from mlx_notebook.testing import build_tiny_model
    from tests.kernel_harness import Harness

    tiny = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    endless = (
        "import mlx_notebook\nfrom pathlib import Path\n"
        "from mlx_lm.utils import load_tokenizer\n"
        "from mlx_notebook.testing import looping_model\n"
        f"tok = load_tokenizer(Path({str(tiny)!r}))\n"
        "mlx_notebook.Engine.default().register_model("
        f'"endless", looping_model(tok, " and on", {args.delay}), tok)\n'
    )
    k = Harness()
    try:
        assert k.execute("%load_ext mlx_notebook")["status"] == "ok"
        assert k.execute(endless)["status"] == "ok"
        if args.hz is not None:
            assert k.execute(f"%config MLXNotebook.refresh_hz = {args.hz}")["status"] == "ok"
        k.execute("%%generate -m endless -n 20 --wait -o warm\nHello", timeout=120)  # warm up
        time.sleep(1.0)
        with k._lock:
            before = {id(m) for msgs in k.outputs.values() for m in msgs}
        t0 = time.monotonic()
        code = f"%%generate -m endless -n {args.tokens} --wait -o h\nHello"
        msg_id = k.execute(code, wait=False)
        k.reply(msg_id, timeout=args.tokens * args.delay * 4 + 120)
        k.idle(msg_id, timeout=60)
        time.sleep(1.0)  # the view's last refresh
        wall = time.monotonic() - t0
        with k._lock:
            new = [m for msgs in k.outputs.values() for m in msgs if id(m) not in before]
        _, text = k.output("print(len(h.text.encode()), h.stats.generation_tokens)")
        try:
            text_bytes, tokens = map(int, text.split())
        except ValueError:
            raise SystemExit(f"the generation did not bind h: {text[-2000:]}") from None
    finally:
        k.close()
    sent = sum(size(m) for m in new)
    kinds: dict[str, list[int]] = {}
    for m in new:
        kinds.setdefault(m["msg_type"], []).append(size(m))
    per = text_bytes / tokens
    print(f"{tokens} tokens in {wall:.1f} s; text {text_bytes} bytes ({per:.1f} a token)")
    for kind, sizes in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind:22s} {len(sizes):5d} messages {sum(sizes):10d} bytes")
    comms = [m for m in new if m["msg_type"] == "comm_msg"]
    payload = sum(len(json.dumps(m["content"]["data"].get("content", {}))) for m in comms)
    if comms:
        print(f"  comm payloads (the deltas themselves): {payload} bytes; the rest of each "
              f"message, Jupyter's envelope: {(sum(map(size, comms)) - payload) / len(comms):.0f} "
              "bytes a message")  # fmt: skip
    print(f"iopub: {sent} bytes, {sent / tokens:.0f} bytes a token, "
          f"{sent / text_bytes:.1f}x the text's own bytes")  # fmt: skip


if __name__ == "__main__":
    main()
