"""One prompt prefilled in fixed-size chunks, sizes alternating in one process.

Usage:
    python benchmarks/bench_chunks.py MODEL [--sizes 128,256,512] [--tokens 512] [--rounds 5]

MODEL is any spec the engine loads (``default:f32``, bench_scale.py's 1B files under
``$MLX_NOTEBOOK_CACHE/bench``). The model is called directly on a fresh KV cache, one
chunk after another (no cost model, no cancel points), the sizes in alternating order
each round; each size's figure is the median tok/s over rounds with min–max. It shows
what a chunk's length costs on its own: the fixed cost of reading every weight per
chunk, and attention that computes a chunk's whole square of scores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--sizes", default="128,256,512", help="chunk lengths")
    ap.add_argument("--tokens", type=int, default=512, help="prompt tokens")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    from mlx_notebook.cpu import ext  # OpenBLAS and the shim before mlx.core
    from mlx_notebook.models import loader

    ext.load()
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    _, model, _, _ = loader.load_spec(args.model)
    ids = mx.array([[1000 + i for i in range(args.tokens)]])

    def prefill(n: int) -> float:
        cache = make_prompt_cache(model)
        t0 = time.perf_counter()
        for s in range(0, args.tokens, n):
            model(ids[:, s : s + n], cache=cache)
            mx.eval([c.state for c in cache])
        return args.tokens / (time.perf_counter() - t0)

    prefill(min(sizes))  # warm
    runs: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(args.rounds):
        for n in sizes if r % 2 == 0 else sizes[::-1]:
            runs[n].append(prefill(n))
    print(f"{args.model}: {args.tokens} tokens, {args.rounds} rounds, {ext.status()}")
    for n, v in runs.items():
        print(f"  chunks of {n:5d}: {statistics.median(v):7.1f} tok/s ({min(v):.1f}–{max(v):.1f})")


if __name__ == "__main__":
    main()
