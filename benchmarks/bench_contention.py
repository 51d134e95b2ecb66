"""Decode speed when other processes keep the cores busy: the thread governor against fixed threads.

Usage: python benchmarks/bench_contention.py [--rounds 3] [--tokens 64] [--busy 0,1,2]

Each run is a fresh process: it starts BUSY busy-loop processes (pure Python
`while True: pass`, one core each), loads the default model, runs a short
warm-up job, then times greedy decode of --tokens tokens on three prompts and
reports the median decode tok/s. Two policies run side by side in a rotated order every
round: the governor (the default, MLX_NOTEBOOK_THREADS=auto) and all threads
always (MLX_NOTEBOOK_THREADS=<cores>, how the engine ran before). The fair share with
BUSY busy processes is the idle speed / (BUSY + 1): what each of BUSY + 1
equally demanding programs would get.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

CHILD = r"""
import json, subprocess, sys
busy, tokens = int(sys.argv[1]), int(sys.argv[2])
procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
try:
    import mlx_notebook
    from mlx_notebook.engine import Engine, Request
    eng = Engine()
    eng.submit(Request("Say hello.", max_tokens=16)).result()
    tps = []
    for i in range(3):
        p = f"Write a long story about a dragon and a lighthouse, part {i}."
        greedy = dict(temperature=0, repetition_penalty=1)
        r = eng.submit(Request(p, max_tokens=tokens, reuse_cache=False, **greedy)).result()
        tps.append(r.stats.generation_tps)
    note = [n for n in eng.info().notes if n.startswith("threads")]
    print(json.dumps({"tps": sorted(tps)[1], "note": note[0] if note else ""}))
finally:
    for p in procs:
        p.kill()
"""


def run(busy: int, tokens: int, policy: str) -> dict:
    env = {**os.environ, "MLX_NOTEBOOK_THREADS": policy}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(busy), str(tokens)],
        env=env, capture_output=True, text=True, check=True, timeout=1200,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--busy", default="0,1,2")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    busies = [int(b) for b in args.busy.split(",")]
    policies = ["auto", str(cores)]
    configs = [(b, p) for b in busies for p in policies]
    res: dict = {c: [] for c in configs}
    for r in range(args.rounds):
        k = r % len(configs)
        for b, p in configs[k:] + configs[:k]:  # rotated: no configuration always first
            out = run(b, args.tokens, p)
            res[b, p].append(out["tps"])
            print(f"round {r + 1}: busy={b} threads={p}: {out['tps']:.1f} tok/s ({out['note']})")
            sys.stdout.flush()
    idle = {p: statistics.median(res[0, p]) for p in policies} if 0 in busies else None
    print(f"\nmedian (min-max) decode tok/s, {args.tokens} tokens, {args.rounds} rounds:")
    for b in busies:
        for p in policies:
            v = res[b, p]
            line = f"  busy={b} threads={'auto' if p == 'auto' else 'all'}: "
            line += f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
            if idle is not None:
                fair = idle["auto"] / (b + 1)
                line += f" = {statistics.median(v) / fair:.2f}x the fair share ({fair:.1f})"
            print(line)


if __name__ == "__main__":
    main()
