"""Prefill with two chunk holds (`ChunkSizer.HOLD_S`), alternating in one process.

Usage:
    python benchmarks/bench_hold.py MODEL [--tokens 512] [--rounds 5] [--holds 2,4]

MODEL is any spec the engine loads (bench_scale.py's 1B files are under
``$MLX_NOTEBOOK_CACHE/bench``). One prefill first teaches the model's cost model; then
each round prefills the same prompt (``max_tokens=1``, no prompt cache) once with each
hold, in alternating order. Prints each hold's tok/s and largest chunk, and the ratio
of the second hold to the first, paired by round: median (min–max).
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")

TEXT = Path(__file__).resolve().parent.parent / "README.md"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=512, help="prompt tokens")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--holds", default="2,4", help="two HOLD_S values, in seconds")
    args = ap.parse_args()
    holds = [float(h) for h in args.holds.split(",")]

    from mlx_notebook.engine import Engine, Request
    from mlx_notebook.engine.decoding import prefill

    eng = Engine.default()
    eng.submit(Request("hi", model=args.model, max_tokens=2)).result()
    tok = eng.registry.peek(args.model).tokenizer
    prompt = tok.decode(tok.encode(TEXT.read_text())[: args.tokens])
    once = dict(model=args.model, chat=False, max_tokens=1, reuse_cache=False)
    eng.submit(Request(prompt, **once)).result()  # the cost model learns the long chunks
    runs: dict[float, list] = {h: [] for h in holds}
    for i in range(args.rounds):
        for h in holds if i % 2 == 0 else holds[::-1]:
            prefill.ChunkSizer.HOLD_S = h  # read at each chunk
            st = eng.submit(Request(prompt, **once)).result().stats
            runs[h].append((st.prompt_tps, st.prefill_chunk))
    for h in holds:
        tps = [t for t, _ in runs[h]]
        chunks = [c for _, c in runs[h]]
        print(f"hold {h:g} s: {statistics.median(tps):.1f} tok/s ({min(tps):.1f}–{max(tps):.1f}),"
              f" largest chunk {min(chunks)}–{max(chunks)}")  # fmt: skip
    ratios = [b[0] / a[0] for a, b in zip(runs[holds[0]], runs[holds[1]])]
    print(
        f"{holds[1]:g} s / {holds[0]:g} s: {statistics.median(ratios):.3f}x "
        f"({min(ratios):.3f}–{max(ratios):.3f}, {len(ratios)} pairs)"
    )
    eng.close()


if __name__ == "__main__":
    main()
