"""Giving freed memory back (`device.release_freed`) on and off, alternating in one process.

Usage:
    python benchmarks/bench_release.py MODEL [--tokens 512] [--reply 32] [--rounds 6]

Each round runs two turns with the give-back on and two with it off, in alternating
order, and times the second of each (the first leaves the heap as that setting does).
A turn is a prompt of ``--tokens`` tokens (no prompt cache) and a greedy reply of
``--reply`` tokens, as a chat turn meets it. The give-back (MLX's buffer cache, then
glibc's ``malloc_trim`` on the CPU) runs after a prefill's last chunk and when the
worker goes idle, so the next prefill writes to fresh pages: what that costs shows in
the prefill and decode rates. Also printed: the process's resident memory once the
worker is idle after each turn.

Prints each setting's rates and resident memory, and on / off paired by round:
median (min–max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")

TEXT = Path(__file__).resolve().parent.parent / "README.md"


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=512, help="prompt tokens")
    ap.add_argument("--reply", type=int, default=32, help="tokens generated after it")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()

    from mlx_notebook.engine import Engine, Request
    from mlx_notebook.engine.decoding import device, prefill
    from mlx_notebook.engine.local import scheduler

    eng = Engine.default()
    greedy = dict(model=args.model, temperature=0, repetition_penalty=1)
    eng.submit(Request("hi", max_tokens=2, **greedy)).result()
    tok = eng.registry.peek(args.model).tokenizer
    ids = tok.encode(TEXT.read_text())
    turn = dict(greedy, chat=False, max_tokens=args.reply, reuse_cache=False)
    eng.submit(Request(tok.decode(ids[: args.tokens]), **turn)).result()  # the cost model
    runs: dict[str, list] = {"on": [], "off": []}
    for i in range(args.rounds):
        for name in ("on", "off") if i % 2 == 0 else ("off", "on"):
            give = device.release_freed if name == "on" else (lambda: None)
            prefill.release_freed = scheduler.release_freed = give  # read at each call
            for warm in (True, False):  # an untimed turn first: the heap as the setting left it
                start = 1 + 4 * i + 2 * (name == "off") + warm  # no prefix shared with another
                r = eng.submit(Request(tok.decode(ids[start : start + args.tokens]), **turn))
                r = r.result()
                time.sleep(0.2)  # the worker goes idle (and gives back, when on)
            runs[name].append((r.stats.prompt_tps, r.stats.generation_tps, rss_mib()))
    prefill.release_freed = scheduler.release_freed = device.release_freed
    for name in ("on", "off"):
        cols = list(zip(*runs[name]))
        print(f"give-back {name:3s}: prefill {statistics.median(cols[0]):.1f} tok/s "
              f"({min(cols[0]):.1f}–{max(cols[0]):.1f}), decode {statistics.median(cols[1]):.1f} "
              f"({min(cols[1]):.1f}–{max(cols[1]):.1f}), resident when idle "
              f"{statistics.median(cols[2]):.0f} MiB")  # fmt: skip
    for i, what in enumerate(("prefill", "decode", "resident")):
        rs = [a[i] / b[i] for a, b in zip(runs["on"], runs["off"])]
        print(f"on / off, {what}: {statistics.median(rs):.3f}x ({min(rs):.3f}–{max(rs):.3f}, "
              f"{len(rs)} pairs)")  # fmt: skip
    eng.close()


if __name__ == "__main__":
    main()
