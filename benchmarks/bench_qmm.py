"""Quantized products on the CPU: the fast path's kernels against float32 and MLX's own.

Usage:
    python benchmarks/bench_qmm.py [--rounds 5] [--rows 1,4,16,43] [--shape 135m|1b]
        [--gguf q4_0|q4_1] [--skip-mlx] [--skip-f32] [--copies N]

For every product of a decode step (stacked q/k/v, output, stacked gate/up, down; the
135M default model's tied 8-bit LM head; ``--shape 1b``: Llama-3.2-1B's layers) and
each row count, the time of ``x @ dequantize(W).T`` up to five ways, interleaved within
each round: the extension's kernels on the packed weights, the same with the AMX tiles
off (where the CPU has them: "row tiles"), the same without the integer sums of
prefill and verify passes (where the CPU has VNNI: "float sums", the row tiles or
widened weights and sgemm: csrc/kernels/qmm_igemm.inc), the float32 product of the same
weights (OpenBLAS through the fast path's shim), and ``mx.quantized_matmul`` (MLX's own
CPU kernel). ``--gguf`` keeps the scales as a GGUF file's float16, and no biases for
Q4_0's symmetric blocks. Figures are medians over rounds; ratios are paired.

Every call of a product reads the same weights, which after the first come from the
CPU's caches (a 1B gate/up is 19 MB: the L3 of many CPUs holds it). ``--copies N``
makes N copies of each product's packed weights and takes the next copy at each
call, so that with enough of them every call reads its weights from memory, as a
decode step does; the packed products' read rate (GB/s) is printed too. It leaves
out the float32 product and MLX's kernel (N copies of float32 weights).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

SHAPES = {  # (name, N, K, bits), group size 32 as in a GGUF
    "135m": [  # SmolLM2-135M
        ("q/k/v", 960, 576, 4),
        ("o", 576, 576, 4),
        ("gate/up", 3072, 576, 4),
        ("down", 576, 1536, 4),
        ("LM head", 49152, 576, 8),
    ],
    "1b": [  # Llama-3.2-1B's layers (bench_scale.py's model)
        ("q/k/v", 3072, 2048, 4),
        ("o", 2048, 2048, 4),
        ("gate/up", 16384, 2048, 4),
        ("down", 2048, 8192, 4),
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default="1,4,16,43")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="135m")
    ap.add_argument("--gguf", choices=["q4_0", "q4_1"], help="float16 scales, as the file's")
    ap.add_argument("--skip-mlx", action="store_true", help="leave out MLX's slow kernel")
    ap.add_argument("--skip-f32", action="store_true", help="leave out the float32 product")
    ap.add_argument("--copies", type=int, default=1, help="copies of the weights, cycled")
    args = ap.parse_args()
    if args.copies > 1:
        args.skip_f32 = args.skip_mlx = True

    from mlx_notebook.cpu import ext as _ext  # OpenBLAS and the shim before mlx.core

    ext = _ext.load()
    if ext is None:
        raise SystemExit(f"extension unavailable: {_ext.status()}")
    import mlx.core as mx

    amx = ext.set_amx(1)
    sums = "integer dots for decode" in _ext.status()  # the integer sums (VNNI) are on

    def switched(off, on):
        """The product with a switch held through mx.eval (the primitive runs then)."""

        def product(x, wq, s, b, bits):
            off()
            try:
                out = ext.quant_matmul(x, wq, s, b, 32, bits)
                mx.eval(out)
            finally:
                on()
            return out

        return product

    tiles_off = switched(lambda: ext.set_amx(0), lambda: ext.set_amx(1))
    float_sums = switched(lambda: ext.set_igemm_from(1 << 30), lambda: ext.set_igemm_from(0))

    def timed(f, reps):
        mx.eval(f())
        t0 = time.perf_counter()
        for _ in range(reps):
            mx.eval(f())
        return (time.perf_counter() - t0) / reps * 1e3

    def ours(x, wq, s, b, bits):
        return ext.quant_matmul(x, wq, s, b, 32, bits)

    def cycled(fn, x, bits, ring):
        """``fn`` on the next copy of the weights at each call."""
        turn = itertools.cycle(ring)
        return lambda: fn(x, *next(turn), bits)

    def packed(n, k, bits):
        """Random weights quantized as the fast path keeps them: ``(wq, s, b)``."""
        wq, s, b = mx.quantize(mx.random.normal((n, k)) * 0.05, group_size=32, bits=bits)
        if args.gguf:
            s = s.astype(mx.float16)
            b = None if args.gguf == "q4_0" else b.astype(mx.float16)
        mx.eval(wq, s, b if b is not None else s)
        return wq, s, b

    cases, nbytes = [], {}
    for name, n, k, bits in SHAPES[args.shape]:
        wq, s, b = packed(n, k, bits)
        ring = [(wq, s, b)] + [packed(n, k, bits) for _ in range(args.copies - 1)]
        bf = s.astype(mx.float32) * -(2 ** (bits - 1)) if b is None else b.astype(mx.float32)
        wf = None if args.skip_f32 else mx.dequantize(wq, s.astype(mx.float32), bf, 32, bits)
        mx.eval(bf, wf if wf is not None else bf)
        for m in map(int, args.rows.split(",")):
            x = mx.random.normal((m, k))
            mx.eval(x)

            ways = {"ours": cycled(ours, x, bits, ring)}
            if not args.skip_f32:
                ways["f32"] = lambda x=x, wf=wf: x @ wf.T
            if sums:
                ways["float sums"] = cycled(float_sums, x, bits, ring)
            if amx:
                ways["row tiles"] = cycled(tiles_off, x, bits, ring)
            if not args.skip_mlx:
                ways["mlx q"] = lambda x=x, wq=wq, s=s, bf=bf, bits=bits: mx.quantized_matmul(
                    x, wq, s.astype(mx.float32), bf, transpose=True, group_size=32, bits=bits
                )
            label = f"{name} ({n}x{k}, {bits}-bit), {m} rows"
            cases.append((label, ways))
            nbytes[label] = sum(a.nbytes for a in (wq, s, b) if a is not None)
    times = {c: {w: [] for w in ways} for c, ways in cases}
    for r in range(args.rounds):
        for label, ways in cases:
            order = list(ways)[r % len(ways) :] + list(ways)[: r % len(ways)]
            for way in order:
                reps = 3 if way == "mlx q" else 10
                times[label][way].append(timed(ways[way], reps))
    print(f"ms per product, median of {args.rounds} rounds; ratios paired round by round")
    for label, ways in cases:
        t = times[label]
        cells = [f"{w} {statistics.median(t[w]):.3f}" for w in ways]
        if args.copies > 1:  # from memory; with one copy it would be a cache's rate
            cells[0] += f" ({nbytes[label] / statistics.median(t['ours']) / 1e6:.1f} GB/s)"
        extra = ""
        for other in ("f32", "row tiles", "float sums"):
            if other in t:
                ra = [a / b for a, b in zip(t[other], t["ours"])]
                extra += (f"; {other}/ours {statistics.median(ra):.2f}x "
                          f"({min(ra):.2f}-{max(ra):.2f})")  # fmt: skip
        if "mlx q" in t:
            rq = [a / b for a, b in zip(t["mlx q"], t["ours"])]
            extra += f", mlx q/ours {statistics.median(rq):.1f}x"
        print(f"  {label}: " + ", ".join(cells) + extra)


if __name__ == "__main__":
    main()
