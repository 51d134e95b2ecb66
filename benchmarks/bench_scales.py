"""One-row 4-bit products at the 1B size with scales and biases held three ways.

Usage:
    python benchmarks/bench_scales.py [--rounds 7] [--int-dots]

A decode step's products of a Llama-3.2-1B-shaped layer stack (16 layers' gate/up,
down and q/k/v/o matrices, 4-bit, groups of 32: more than any cache holds) on the
fast path's kernels, with the scales and biases in float32, in float16, and float16
scales without biases (symmetric blocks, as GGUF's Q4_0). The three are interleaved
within each round; each figure is the median time of one layer's products over
rounds, with min–max, and the bytes it read per second.

With ``--int-dots`` each of the three runs twice a round, with the integer dots
(qmm_dots.inc) and with float inputs, alternating, and the ratio float ÷ dots of each
is printed, paired by round: the dots' gain, where the CPU has AVX-512 VNNI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")

SHAPES = [(8192 * 2, 2048), (2048, 8192), (3072, 2048), (2048, 2048)]  # N, K per layer
LAYERS = 16
KINDS = ("float32", "float16", "float16, no biases")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--int-dots", action="store_true", help="also run each without the dots")
    args = ap.parse_args()

    from mlx_notebook.cpu import ext as _ext  # OpenBLAS and the shim before mlx.core

    ext = _ext.load()
    import mlx.core as mx

    if ext is None:
        raise SystemExit(f"no extension: {_ext.status()}")
    layers = []
    for i in range(LAYERS):
        mats = []
        for j, (n, k) in enumerate(SHAPES):
            w = mx.random.normal((n, k), key=mx.random.key(i * 8 + j))
            wq, s, b = mx.quantize(w, group_size=32, bits=4)
            mats.append((wq, s, b, s.astype(mx.float16), b.astype(mx.float16)))
        mx.eval(mats)
        layers.append(mats)
    xs = {k: mx.random.normal((1, k)) for _, k in SHAPES}

    def args_for(kind, wq, s, b, s16, b16):
        if kind == "float32":
            return wq, s, b
        return (wq, s16, b16) if kind == "float16" else (wq, s16, None)

    def step(kind, dots: bool = True) -> float:
        ext.set_int_dots(dots)  # only the A/B switches it: otherwise as loaded
        t = time.perf_counter()
        for mats in layers:
            for (_, k), m in zip(SHAPES, mats):
                mx.eval(ext.quant_matmul(xs[k], *args_for(kind, *m), 32, 4))
        return (time.perf_counter() - t) / LAYERS

    # on where the CPU has VNNI, MLX_NOTEBOOK_INT_DOTS allows them and their check passed
    dots = "integer dots for decode steps" in _ext.status()
    if args.int_dots and not dots:
        raise SystemExit(f"no integer dots here: {_ext.status()}")
    step("float32", dots)  # warm
    times = {k: [] for k in KINDS}
    floats = {k: [] for k in KINDS}  # --int-dots: the same products on float inputs
    for r in range(args.rounds):
        for kind in KINDS[r % 3 :] + KINDS[: r % 3]:
            pair = [(times, dots), (floats, False)] if args.int_dots else [(times, dots)]
            for book, on in pair if r % 2 == 0 else pair[::-1]:
                book[kind].append(step(kind, on))
    weights = sum(n * k for n, k in SHAPES)
    per_group = {"float32": 8, "float16": 4, "float16, no biases": 2}
    print(f"a layer's one-row products, {weights / 1e6:.1f}M 4-bit weights, {args.rounds} rounds, "
          f"integer dots {'on' if dots else 'off'}")  # fmt: skip
    for kind, v in times.items():
        m = statistics.median(v)
        nbytes = weights / 2 + weights / 32 * per_group[kind]
        print(f"  {kind:20s} {m * 1e3:6.2f} ms ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}), "
              f"{nbytes / 1e6:5.1f} MB, {nbytes / m / 1e9:5.1f} GB/s, "
              f"{weights / m / 1e9:5.1f} G weights/s")  # fmt: skip
    if args.int_dots:
        print("float inputs ÷ integer dots, time a layer's products, paired by round:")
        for kind, v in times.items():
            r = [f / d for f, d in zip(floats[kind], v)]
            print(f"  {kind:20s} {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}), "
                  f"float inputs {statistics.median(floats[kind]) * 1e3:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
