"""What per-token records cost: decode tok/s with logprobs off, 0 and 5 (default model).

Usage: python benchmarks/bench_logprobs.py [--rounds 5] [--tokens 64]

Greedy, one job alone per run, the same prompt; the three sides alternate in
order every round (rotated). Prints each side's median and min-max tok/s, and
per side the median of the per-round ratios against ``off`` with a 95% interval.
"""

import argparse
import os
import statistics

from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX
from mlx_notebook.measure.stats import ratio

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

PROMPT = "Describe a rainy afternoon in a small town."
SIDES = {"off": None, "logprobs=0": 0, "logprobs=5": 5}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    eng = Engine()
    base = dict(
        max_tokens=args.tokens, temperature=0, repetition_penalty=1, reuse_cache=False,
        batch=False,
    )  # fmt: skip
    eng.submit(Request(PROMPT, **base)).result()  # load, warm up
    got = {k: [] for k in SIDES}
    ratios = {k: [] for k in SIDES if k != "off"}
    names = list(SIDES)
    for r in range(args.rounds):
        order = names[r % 3 :] + names[: r % 3]
        this = {}
        for side in order:
            res = eng.submit(Request(PROMPT, logprobs=SIDES[side], **base)).result()
            this[side] = res.stats.generation_tps
            got[side].append(this[side])
        for k in ratios:
            ratios[k].append(this[k] / this["off"])
        print(f"round {r + 1}: " + ", ".join(f"{k} {this[k]:.1f}" for k in names) + " tok/s")
    for k, v in got.items():
        print(f"{k}: median {statistics.median(v):.1f} tok/s ({min(v):.1f}-{max(v):.1f})")
    for k, v in ratios.items():
        r = ratio(v)  # a 95% interval of the geometric mean ratio, over the rounds
        print(f"{k} / off: median {r.median:.2f}x (rounds {min(v):.2f}-{max(v):.2f}; "
              f"95% CI {r.low:.2f}-{r.high:.2f}x), {args.rounds} rounds")  # fmt: skip
    eng.close()


if __name__ == "__main__":
    main()
