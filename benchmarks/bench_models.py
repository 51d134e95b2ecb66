"""Default-model benchmark: decode speed per precision variant, with and without OpenBLAS.

Each configuration runs in its own subprocess, since OpenBLAS can only be
loaded before mlx.core is first imported. Also prints load time: first
conversion from GGUF versus a cached load.

Usage: python benchmarks/bench_models.py [--tokens 64] [--repeats 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import mlx_notebook
from mlx_notebook.cpu import blas as _blas
from mlx_notebook.engine import Engine, Request, Token
e = Engine()
e.call(lambda: e.registry.get("default")).result()
load_s = time.perf_counter() - t0
tps = []
for _ in range(int(sys.argv[2])):
    times = []
    prompt = "Write a short story about a lighthouse keeper."
    greedy = dict(temperature=0, repetition_penalty=1)
    job = e.submit(Request(prompt, max_tokens=int(sys.argv[1]), **greedy))
    job.add_listener(lambda ev: isinstance(ev, Token) and times.append(time.perf_counter()))
    job.result()
    tps.append((len(times) - 1) / (times[-1] - times[0]))
print(json.dumps({"tps": tps, "load_s": load_s, "blas": _blas.status()["active"],
                  "dtype": e.info().models[0].dtype}))
e.close()
"""


def child(variant, blas, tokens, repeats, cache=None):
    env = dict(
        os.environ, MLX_NOTEBOOK_DEFAULT_VARIANT=variant, MLX_NOTEBOOK_BLAS="" if blas else "0"
    )
    if cache:
        env["MLX_NOTEBOOK_CACHE"] = cache
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tokens), str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = {}
    for variant in ("q", "f32"):
        for blas in (True, False):
            r = child(variant, blas, args.tokens, args.repeats)
            rows[variant, blas] = statistics.median(r["tps"])
            print(
                f"variant={variant:<4} openblas={'on ' if r['blas'] else 'off'} "
                f"dtype={r['dtype']:<8} decode {rows[variant, blas]:6.1f} tok/s "
                f"(median of {args.repeats})"
            )
    print(
        f"OpenBLAS speedup: f32 {rows['f32', True] / rows['f32', False]:.2f}x, "
        f"4-bit {rows['q', True] / rows['q', False]:.2f}x (expected >= 1.5x on f32)"
    )
    print(f"f32 vs 4-bit with OpenBLAS: {rows['f32', True] / rows['q', True]:.2f}x")
    with tempfile.TemporaryDirectory() as cache:
        first = child("f32", True, 2, 1, cache)["load_s"]
        cached = child("f32", True, 2, 1, cache)["load_s"]
    print(
        f"load time (process start to model ready): first conversion {first:.2f} s, "
        f"cached {cached:.2f} s"
    )


if __name__ == "__main__":
    main()
