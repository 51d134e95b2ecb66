"""How long the token inspector takes to render 2,000 tokens with five alternatives each.

Usage: python benchmarks/bench_inspect.py [--runs 7]

Prints the median and min-max milliseconds over ``--runs`` renders, and the HTML size.
"""

import argparse
import math
import os
import statistics
import time

from mlx_notebook.engine.token_records import TokenRecord
from mlx_notebook.notebook.views.inspect import inspect_html

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    top = tuple((f" a{j}", j, math.log(0.1)) for j in range(5))
    records = [
        TokenRecord(i, i, f" w{i}", math.log((i % 100 + 1) / 101), 1, 0.5, top) for i in range(2000)
    ]
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        html = inspect_html(records)
        times.append((time.perf_counter() - t0) * 1000)
    spread = f"{min(times):.1f}-{max(times):.1f}"
    size = len(html) // 1000
    median = statistics.median(times)
    print(f"2000 tokens: median {median:.1f} ms ({spread}), {args.runs} runs, {size} kB")


if __name__ == "__main__":
    main()
