"""Compare and Sweep figures for the README, on the bundled default model.

Usage: python benchmarks/bench_compare.py [--calls N] [--repeats R]

Runs mlx_notebook.compare N times on a copy-heavy and an open-ended prompt (each call
is R interleaved pairs), prints every verdict with its interval, then a sweep of k on
both prompts.
"""

import argparse
import statistics

import mlx_notebook as mn
from mlx_notebook.engine import Engine, Request

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
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--sweep", default="1,2,3,4,6,8")
    args = ap.parse_args()
    eng = Engine.default()
    eng.submit(Request("hi", max_tokens=2)).result()
    for name, (prompt, n) in PROMPTS.items():
        print(f"\n== {name}: compare, k={args.k}, {args.repeats} pairs per call, {n} tokens")
        e2e, dec = [], []
        for _ in range(args.calls):
            r = mn.compare(prompt, max_tokens=n, repeats=args.repeats, num_draft_tokens=args.k)
            print("  ", r.verdict_line())
            e2e.append(r.ratio("e2e").median)
            dec.append(r.ratio("decode").median)
        print(
            f"   median over calls: end to end {statistics.median(e2e):.2f}x, "
            f"decode {statistics.median(dec):.2f}x"
        )
    ks = [int(k) for k in args.sweep.split(",")]
    for name, (prompt, n) in PROMPTS.items():
        s = mn.sweep(prompt, ks=ks, repeats=args.repeats, max_tokens=n)
        print(f"\n== {name}: sweep k={ks}, {args.repeats} runs per k")
        print("  ", s.verdict_line())
        for row in s.rows:
            ci = f"{row['low']:.2f}-{row['high']:.2f}" if row["low"] is not None else "-"
            print(
                f"   k={row['k']}: {row['speedup']:.2f}x (95% CI {ci}), "
                f"acceptance {row['acceptance']:.0%}"
            )


if __name__ == "__main__":
    main()
