"""What a forward pass costs as its rows grow: verify passes and batched decode steps.

Usage: python benchmarks/bench_rows.py [--rounds 5] [--context 256] [--model default:f32]

On the bundled default model as the engine loads it (on CPU: float32, the fast path
on unless MLX_NOTEBOOK_FAST=0), on the engine's worker thread, after ``--context``
tokens are in the cache:

- a decode step of one row (one token): the unit;
- a verify pass of M tokens on one row (speculative decoding checks a draft of M - 1);
- a batched decode step of B rows, one token each, on a batched KV cache (mlx-lm's
  ``KVCache.merge``), as ``map`` and concurrent jobs decode.

``--float-sums`` (CPUs with VNNI) also times every pass of 16 rows or more with the
integer sums off (the row tiles, as before csrc/kernels/qmm_igemm.inc), in the same
rounds, and reports each pair's ratio.

Each pass is the model's forward plus the greedy pick of every row (the engine's own:
``engine.decoding.sampling``), evaluated. Every round times each shape once per repeat in a rotated
order, so drift of a shared machine hits all shapes alike; the cost of a shape is
reported as its time divided by the one-row step's in the same round, median (min-max)
over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

VERIFY = (2, 5, 9, 17, 25, 33)
BATCH = (2, 4, 8, 16, 32)


def measure(lm, context: int, rounds: int, repeats: int, float_sums: bool) -> dict:
    """Per shape, its cost over a one-row step in each round."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, make_prompt_cache, trim_prompt_cache

    from mlx_notebook.cpu import ext as cpu_ext
    from mlx_notebook.cpu import fast as cpu_fast
    from mlx_notebook.engine.decoding import sampling

    model = lm.model
    tables = cpu_fast.rope_tables(model)  # the engine pins each batched step's RoPE rows

    def filled(seed: int):
        cache = make_prompt_cache(model)
        ids = mx.array([[(7 * i + 13 * seed) % 20000 + 100 for i in range(context)]])
        mx.eval(model(ids, cache=cache))
        return cache

    solo = filled(0)
    batches = {}
    for b in BATCH:
        rows = [filled(s) for s in range(b)]
        batches[b] = [KVCache.merge([r[i] for r in rows]) for i in range(len(rows[0]))]
        mx.eval([c.state for c in batches[b]])

    def run(shape):
        if len(shape) == 3:  # the same pass with the integer sums off
            ext = cpu_ext.load()
            ext.set_igemm_from(1 << 30)
            try:
                return run(shape[:2])
            finally:
                ext.set_igemm_from(0)
        kind, n = shape
        if kind == "verify" or n == 1:
            out = model(mx.array([[101 + i for i in range(n)]]), cache=solo)
            mx.eval(sampling.argmax(out))
            trim_prompt_cache(solo, n)
        else:
            cache = batches[n]
            for t in tables:
                t.pin([context] * n)
            out = model(mx.array([[101]] * n), cache=cache)
            for t in tables:
                t.pin(None)
            mx.eval(sampling.argmax(out))
            trim_prompt_cache(cache, 1)  # so every repeat sees the same context

    shapes = [("step", 1)] + [("verify", m) for m in VERIFY] + [("batch", b) for b in BATCH]
    if float_sums:
        shapes += [(k, n, "float sums") for k, n in shapes if n >= 16]
    for s in shapes:  # warm-up: first calls allocate
        run(s)
    costs: dict[str, list[float]] = {}
    for r in range(rounds):
        order = shapes[r % len(shapes) :] + shapes[: r % len(shapes)]
        took = {s: [] for s in shapes}
        for _ in range(repeats):
            for s in order:
                t0 = time.perf_counter()
                run(s)
                took[s].append(time.perf_counter() - t0)
        unit = statistics.median(took[("step", 1)])
        for s in shapes:
            name = "one-row step" if s[0] == "step" else f"{s[0]} {s[1]}"
            if len(s) == 3:
                name += ", float sums"
                ratio = statistics.median(took[s]) / statistics.median(took[s[:2]])
                costs.setdefault(f"{s[0]} {s[1]}, float ÷ int", []).append(ratio)
            costs.setdefault(name, []).append(statistics.median(took[s]) / unit)
        costs.setdefault("one-row step, ms", []).append(unit * 1e3)
    return costs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--model", default="default", help="a model spec, e.g. default:f32")
    ap.add_argument("--float-sums", action="store_true", help="also without the integer sums")
    args = ap.parse_args()
    eng = Engine()
    eng.submit(Request("hi", model=args.model, max_tokens=1)).result()  # load the model
    lm = eng.registry.get(args.model)
    work = lambda: measure(lm, args.context, args.rounds, args.repeats, args.float_sums)  # noqa: E731
    costs = eng.run_on_worker(work, timeout=3600)
    print(f"{args.model} on {eng.info().device}, context {args.context}, {args.rounds} rounds")
    for name, xs in costs.items():
        mid, lo, hi = statistics.median(xs), min(xs), max(xs)
        unit = "" if name.endswith(", ms") else "x"
        print(f"  {name:28s} {mid:6.2f}{unit} ({lo:.2f}-{hi:.2f})")
    eng.close()


if __name__ == "__main__":
    main()
