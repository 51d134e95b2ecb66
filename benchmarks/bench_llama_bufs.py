"""llama.cpp with and without its repacked CPU buffers, alternating, on the same files.

Usage:
    python benchmarks/bench_llama_bufs.py GGUF [GGUF ...] [--rounds 3] [--llama-python PY]

Each run is `bench_cpu.py`'s llama.cpp child (64 greedy tokens, then a 512-token
prefill), once with llama.cpp's defaults and once with ``MLXNB_LLAMA_PLAIN=1``
(``use_extra_bufts`` off, as the benchmarks ran until 2026-12-01), the two alternating
in each round and each file in turn. Prints decode and prefill tok/s and peak resident
memory: median (min-max) over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_cpu import LLAMA, ROOT, run

PROMPT = "Describe a rainy afternoon in a small town."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--llama-python", default=sys.executable, help="interpreter with llama_cpp")
    args = ap.parse_args()
    text = ROOT / "docs" / "performance-log.md"
    sides = {"default": {}, "plain": {"MLXNB_LLAMA_PLAIN": "1"}}
    results = {(f, s): [] for f in args.files for s in sides}
    for r in range(args.rounds):
        for f in args.files:
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for s in order:
                cmd = [args.llama_python, "-c", LLAMA, f, "64", PROMPT, str(text), "512"]
                results[f, s].append(run(cmd, sides[s]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def fmt(xs, scale=1.0):
        xs = [x / scale for x in xs]
        return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"

    for (f, s), rs in results.items():
        print(f"{Path(f).name:40s} {s:8s} decode {fmt([x['decode'] for x in rs])} tok/s, "
              f"prefill {fmt([x['prefill'] for x in rs])} tok/s, "
              f"peak {fmt([x['rss'] for x in rs], 1e6)} MB")  # fmt: skip


if __name__ == "__main__":
    main()
