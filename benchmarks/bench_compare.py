"""Compare and Sweep figures for docs/performance.md, on the bundled default model.

Usage: python benchmarks/bench_compare.py [--calls N] [--repeats R] [--sweep-repeats R]

Runs mlx_notebook.compare N times on a copy-heavy and an open-ended prompt (each call
is R interleaved pairs), prints every verdict with its interval, then a sweep of k on
both prompts.
"""

import argparse
import os
import statistics
import time

import mlx_notebook as mn
from mlx_notebook.engine import Engine, Request

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

PARAGRAPH = (
    "The river winds through the valley, past the old mill and the stone bridge. "
    "Children play on its banks in summer, and in winter the ice creaks under the moon. "
)
PROMPTS = {
    # 64 tokens: room for the whole paragraph (the model ends the copy with EOS).
    "copy-heavy": (f"Repeat this paragraph exactly:\n\n{PARAGRAPH}", 64),
    "open-ended": ("Write a haiku about the sea.", 24),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=None, help="fixed pairs (default: until clear)")
    ap.add_argument("--sweep-repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--sweep", default="1,2,3,4,6,8")
    args = ap.parse_args()
    eng = Engine.default()
    eng.submit(Request("hi", max_tokens=2)).result()
    for name, (prompt, n) in PROMPTS.items():
        plan = f"{args.repeats} pairs" if args.repeats else "pairs until clear"
        print(f"\n== {name}: compare, k={args.k}, {plan} per call, {n} tokens")
        e2e, dec, verdicts, pairs, secs = [], [], [], [], []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            r = mn.compare(prompt, max_tokens=n, repeats=args.repeats, num_draft_tokens=args.k)
            secs.append(time.perf_counter() - t0)
            print("  ", r.verdict_line())
            e2e.append(r.ratio("e2e").median)
            dec.append(r.ratio("decode").median)
            verdicts.append(r.verdict)
            pairs.append(len(r.pairs()))
        counts = {v: verdicts.count(v) for v in sorted(set(verdicts))}
        print(
            f"   verdicts {counts}; pairs per call median {statistics.median(pairs)} "
            f"({min(pairs)}-{max(pairs)}); seconds per call median {statistics.median(secs):.1f}; "
            f"median over calls: end to end {statistics.median(e2e):.2f}x, "
            f"decode {statistics.median(dec):.2f}x"
        )
    ks = [int(k) for k in args.sweep.split(",")]
    for name, (prompt, n) in PROMPTS.items():
        t0 = time.perf_counter()
        s = mn.sweep(prompt, ks=ks, repeats=args.sweep_repeats, max_tokens=n)
        took = time.perf_counter() - t0
        print(f"\n== {name}: sweep k={ks}, {args.sweep_repeats} rounds, {took:.0f} s")
        print("  ", s.verdict_line())
        for row in s.rows:
            ci = f"{row['low']:.2f}-{row['high']:.2f}" if row["low"] is not None else "-"
            sp = "-" if row["speedup"] is None else f"{row['speedup']:.2f}x"
            print(
                f"   k={row['k']}: {row['runs']} runs, {sp} (95% CI {ci}), "
                f"acceptance {row['acceptance']:.0%}"
            )


if __name__ == "__main__":
    main()
