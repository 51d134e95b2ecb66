"""Prefill with a chunk's quantized MLP in blocks of rows against the chunk at once.

Usage: python benchmarks/bench_mlp_rows.py [--model PATH_OR_SPEC] [--rounds 6] [--prompt 512]

A fused layer's prefill chunk computes its gate/up product, SwiGLU and down product
in blocks of rows whose buffers fit 16 MB (``MLP_BYTES``, csrc/kernels/layer.c: 160
rows of a 1B model); before, they were the whole chunk's (59 MB at 511 rows). One
engine, one model load; every round prefills the same ``--prompt``-token text (from
docs/performance-log.md, a different start each round) once each way, the order
alternating, with ``ext.set_mlp_rows`` switched on the worker between jobs and the
prompt cache off. Reports each way's prefill tok/s and the paired ratio, median
(min-max) over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

WAYS = {"blocks": -1, "whole chunk": 0}  # set_mlp_rows: -1 is the default
TEXT = Path(__file__).resolve().parents[1] / "docs" / "performance-log.md"


def spread(xs: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default", help="a model spec or a GGUF path")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    args = ap.parse_args()

    from mlx_notebook.cpu import ext as cpu_ext

    eng = Engine()
    greedy = dict(model=args.model, temperature=0.0, chat=False, reuse_cache=False)
    eng.submit(Request("hi", max_tokens=2, **greedy)).result()  # load and warm up
    ext = cpu_ext.load()
    tok = eng.registry.peek(args.model).tokenizer
    ids = tok.encode(TEXT.read_text())

    def prefill(way: str, i: int) -> float:
        eng.run_on_worker(lambda: ext.set_mlp_rows(WAYS[way]), timeout=60)
        start = 997 * i  # another stretch each round (the prompt cache is off too)
        text = tok.decode(ids[start : start + args.prompt])
        return eng.submit(Request(text, max_tokens=1, **greedy)).result().stats.prompt_tps

    tps: dict[str, list[float]] = {w: [] for w in WAYS}
    try:
        for w in WAYS:  # untimed: the chunk sizer's first long prompt, each way's buffers
            prefill(w, args.rounds)
        for r in range(args.rounds):
            order = list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]
            for w in order:
                tps[w].append(prefill(w, r))
    finally:
        try:
            eng.run_on_worker(lambda: ext.set_mlp_rows(-1), timeout=60)
        finally:
            eng.close()
    print(f"{args.model}: prefill of {args.prompt} tokens, {args.rounds} rounds")
    for w, xs in tps.items():
        print(f"  {w:15s} {spread(xs)} tok/s")
    ratios = [a / b for a, b in zip(tps["blocks"], tps["whole chunk"], strict=True)]
    print(f"  blocks ÷ whole chunk, paired by round: {spread(ratios, '{:.2f}')}x")


if __name__ == "__main__":
    main()
