"""Sampling on the CPU: MLX's own row operations against the fast path's kernels.

Usage: python benchmarks/bench_sampling.py [--rounds 5] [--tokens 48]

On the bundled default model as the engine loads it, at its recommended sampling
(temperature 0.2, top-p 0.9, repetition penalty 1.1: what a job gets by default):

- per row: each piece of a sampled step (the normalizer ``logsumexp``, mlx-lm's
  nucleus filter, the draw; the greedy pick for comparison) on the model's own logits,
  MLX's function and the kernel alternating, median of 50 calls each per round;
- in the engine: a job decoding ``--tokens`` tokens alone, and a ``map`` of 8 prompts,
  with the kernels on and off (``MLX_NOTEBOOK_NATIVE_SAMPLING=0``), in alternating order
  each round, fresh prompts each round; decode tok/s of the job, aggregate generated
  tok/s of the map (wall time, prefill included).

Ratios are paired within a round and reported as median (min-max) over rounds. The
kernels give MLX's numbers bit for bit (``tests/cpu/test_sampling.py``), so both
settings draw the same tokens from the same seed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import mlx_notebook  # first: it loads OpenBLAS before MLX
from mlx_notebook.engine import Engine, Request
from mlx_notebook.engine.decoding import sampling

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

SUBJECTS = [
    "the sea", "a lighthouse", "autumn leaves", "a busy market", "a mountain lake",
    "an old library", "a desert night", "a snowy village", "a train journey", "a city park",
    "a thunderstorm", "a garden in spring", "a quiet harbour", "a forest path", "a river delta",
    "a winter morning", "a summer fair", "a night sky", "a fishing boat", "a country road",
]  # fmt: skip


def fmt(xs, digits=2):
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def row_pieces(eng, rounds: int) -> dict[str, list[float]]:
    """Per piece, MLX's time over the kernel's in each round (and the times, in ms)."""

    def work():
        import mlx.core as mx
        from mlx_lm.sample_utils import apply_top_p, categorical_sampling

        lm = eng.registry.get("default")
        ids = lm.tokenizer.encode("Write a detailed essay about the sea and its tides.")
        logits = lm.model(mx.array([ids]))[0, -1:, :]
        lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        kept = apply_top_p(lp, 0.9)
        mx.eval(lp, kept)
        pieces = {
            "logsumexp": (
                lambda: mx.logsumexp(logits, axis=-1, keepdims=True),
                lambda: sampling.logsumexp(logits),
            ),
            "nucleus filter": (
                lambda: apply_top_p(lp, 0.9),
                lambda: sampling.apply_top_p(lp, 0.9),
            ),
            "draw": (
                lambda: categorical_sampling(kept, 0.2),
                lambda: sampling.categorical_sampling(kept, 0.2),
            ),
            "greedy pick": (lambda: mx.argmax(lp, axis=-1), lambda: sampling.argmax(lp)),
        }
        out = {k: {"mlx": [], "kernel": []} for k in pieces}
        for r in range(rounds):
            for name, fns in pieces.items():
                order = [("mlx", fns[0]), ("kernel", fns[1])]
                for side, fn in order if r % 2 == 0 else order[::-1]:
                    ts = []
                    for _ in range(50):
                        t0 = time.perf_counter()
                        mx.eval(fn())
                        ts.append(time.perf_counter() - t0)
                    out[name][side].append(statistics.median(ts) * 1e3)
        return out

    return eng.run_on_worker(work, timeout=3600)


def engine_runs(eng, rounds: int, tokens: int) -> dict[str, dict[str, list[float]]]:
    """Decode tok/s of a job alone and aggregate tok/s of a map of 8, kernels on and off."""
    out = {"alone": {"on": [], "off": []}, "map of 8": {"on": [], "off": []}}
    for r in range(rounds):
        order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
        for i, side in enumerate(order):
            os.environ[sampling.ENV] = "1" if side == "on" else "0"
            salt = f"#{r}.{i}"
            job = Request(
                f"Write a detailed essay about {SUBJECTS[r % 20]}. ({salt})",
                max_tokens=tokens,
                batch=False,
            )
            out["alone"][side].append(eng.submit(job).result().stats.generation_tps)
            prompts = [
                f"Write a detailed essay about {SUBJECTS[(r + k) % 20]}. ({salt})" for k in range(8)
            ]
            res = mlx_notebook.map(prompts, max_tokens=tokens, backend=eng)
            out["map of 8"][side].append(res.tps)
    os.environ.pop(sampling.ENV, None)
    return out


def report(table: dict, keys: tuple[str, str], labels: tuple[str, str], digits: int) -> None:
    """One line per row of ``table``: both sides and their paired ratio."""
    a, b = keys
    for name, t in table.items():
        ratios = [x / y for x, y in zip(t[a], t[b])]
        print(
            f"  {name:15s} {labels[0]} {fmt(t[a], digits)}  {labels[1]} {fmt(t[b], digits)}"
            f"  {labels[0]} / {labels[1]} {fmt(ratios)}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    eng = Engine()
    first = eng.submit(Request("hi", max_tokens=2)).result()
    print(f"default model on {first.stats.sampling}")
    pieces = row_pieces(eng, args.rounds)
    print(f"\nPer row (one row of the model's logits), ms, median over {args.rounds} rounds:")
    report(pieces, ("mlx", "kernel"), ("MLX", "kernel"), 3)
    runs = engine_runs(eng, args.rounds, args.tokens)
    print(f"\nIn the engine ({args.tokens} tokens a row, the model's sampling), tok/s:")
    report(runs, ("on", "off"), ("kernels", "MLX"), 1)
    eng.close()


if __name__ == "__main__":
    main()
