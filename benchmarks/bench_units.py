"""Decode with a one-row product's rows in 4 long runs against units of 64 rows.

Usage: python benchmarks/bench_units.py [--model PATH_OR_SPEC] [--rounds 8] [--tokens 96]

On two cores a decode step's one-row products are split between the engine's worker
and helper.c's thread. The product's blocks of four weight rows go in 4 runs of
consecutive blocks, each thread claiming the next run as it is free (the default);
before, they went in units of 16 blocks (64 rows), which the threads took in turn.
One engine, one model load; every round decodes ``--tokens`` greedy tokens once each
way, the order alternating, with ``ext.set_one_row_blocks`` switched on the worker
between jobs. Reports each way's tok/s and the paired ratio, median (min-max) over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics

from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

WAYS = {"4 runs": 0, "64-row units": 16}  # set_one_row_blocks: 0 is the default


def spread(xs: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default", help="a model spec or a GGUF path")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()

    from mlx_notebook.cpu import blas
    from mlx_notebook.cpu import ext as cpu_ext

    if not blas.AVX512 <= blas._cpu_flags():  # the four-row blocks are AVX-512's
        raise SystemExit("this CPU has no AVX-512: one-row products take no units here")
    eng = Engine()
    greedy = dict(model=args.model, temperature=0.0)
    eng.submit(Request("hi", max_tokens=4, **greedy)).result()  # load and warm up
    ext = cpu_ext.load()

    def decode(way: str, i: int) -> float:
        eng.run_on_worker(lambda: ext.set_one_row_blocks(WAYS[way]), timeout=60)
        req = Request(f"Tell me a story, number {i}.", max_tokens=args.tokens, **greedy)
        return eng.submit(req).result().stats.generation_tps

    tps: dict[str, list[float]] = {w: [] for w in WAYS}
    try:
        for r in range(args.rounds):
            order = list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]
            for w in order:
                tps[w].append(decode(w, r))
    finally:
        try:
            eng.run_on_worker(lambda: ext.set_one_row_blocks(0), timeout=60)
        finally:
            eng.close()
    print(f"{args.model}: decode of {args.tokens} greedy tokens, {args.rounds} rounds")
    for w, xs in tps.items():
        print(f"  {w:14s} {spread(xs)} tok/s")
    ratios = [a / b for a, b in zip(tps["4 runs"], tps["64-row units"], strict=True)]
    print(f"  4 runs ÷ 64-row units, paired by round: {spread(ratios, '{:.2f}')}x")


if __name__ == "__main__":
    main()
