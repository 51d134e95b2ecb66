"""Batched generation on the bundled default model: map() against one-after-another.

Usage: python benchmarks/bench_batch.py [--rounds 3] [--tokens 64] [--sampling model|greedy]

Each round runs, in alternating order, the same short prompts as one `map` (the
engine decodes them together) and as jobs run alone one after another, for 8
and for 4 prompts, both sides with the same sampling: the model's own (what a job
gets by default; the bundled model's is temperature 0.2, top-p 0.9, repetition
penalty 1.1) or greedy. Every round uses prompts no earlier round used, so neither
side reuses the other's prompt cache beyond the shared chat-template prefix.
Prints the aggregate generated tok/s (wall time, prefill included) as median
(min-max), the per-round ratio, and the decode step time per row (from each
row's decode tok/s) batched and alone; then, over rounds + 2 trials, the time
to first token of a job submitted while 8 rows decode.
"""

import argparse
import os
import statistics
import time

import mlx_notebook
from mlx_notebook.engine import Engine, Request, Token

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

SUBJECTS = [
    "the sea", "a lighthouse", "autumn leaves", "a busy market", "a mountain lake",
    "an old library", "a desert night", "a snowy village", "a train journey", "a city park",
    "a thunderstorm", "a garden in spring", "a quiet harbour", "a forest path", "a river delta",
    "a winter morning", "a summer fair", "a night sky", "a fishing boat", "a country road",
    "a bakery", "a bridge at dusk", "a windmill", "a rainy street", "a school yard",
    "a museum hall", "a meadow", "a coral reef", "a volcano", "a glacier", "a vineyard",
    "a canyon",
]  # fmt: skip


def prompts(round_: int, n: int, salt: int) -> list[str]:
    start = (round_ * 12 + salt * 8) % len(SUBJECTS)
    chosen = [SUBJECTS[(start + i) % len(SUBJECTS)] for i in range(n)]
    # Prompts that run to the token budget: every row generates exactly --tokens.
    return [f"Write a detailed essay about {s}. (#{round_}.{salt})" for s in chosen]


SAMPLING = {"model": {}, "greedy": dict(temperature=0, repetition_penalty=1)}


def batched(eng, ps, tokens, sampling) -> tuple[float, list[float]]:
    """Aggregate tok/s of one map, and each row's decode tok/s."""
    res = mlx_notebook.map(ps, max_tokens=tokens, backend=eng, **sampling)
    return res.tps, [r.stats.generation_tps for r in res]


def sequential(eng, ps, tokens, sampling) -> tuple[float, list[float]]:
    """Aggregate tok/s of the prompts run alone one after another, and each one's decode tok/s."""
    t0 = time.perf_counter()
    n, rates = 0, []
    for p in ps:
        st = eng.submit(Request(p, max_tokens=tokens, batch=False, **sampling)).result().stats
        n += st.generation_tokens
        rates.append(st.generation_tps)
    return n / (time.perf_counter() - t0), rates


def admission(eng, tokens=160) -> float:
    """Seconds to the first token of a job submitted while 8 rows decode."""
    eng.max_batch = 9
    rows = [
        eng.submit(Request(p, max_tokens=tokens, temperature=0, repetition_penalty=1))
        for p in prompts(99, 8, 0)
    ]
    for r in rows:
        next(e for e in r.events(detach=True) if isinstance(e, Token))
    time.sleep(0.5)
    new = eng.submit(Request("Name a colour.", max_tokens=4))
    t0 = time.perf_counter()
    next(e for e in new.events(detach=True) if isinstance(e, Token))
    ttft = time.perf_counter() - t0
    eng.cancel_all()
    for j in rows + [new]:
        j.wait()
    eng.max_batch = 8
    return ttft


def fmt(xs):
    lo, mid, hi = min(xs), statistics.median(xs), max(xs)
    digits = 3 if hi < 1 else 1
    return f"{mid:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--sampling", choices=sorted(SAMPLING), default="model")
    args = ap.parse_args()
    sampling = SAMPLING[args.sampling]
    eng = Engine()
    eng.submit(Request("hi", max_tokens=2)).result()
    for n in (8, 4):
        tps = {"batched": [], "sequential": []}
        steps = {"batched": [], "sequential": []}  # ms per decode step, per row
        ratios = []
        for r in range(args.rounds):
            order = [("batched", batched), ("sequential", sequential)]
            got = {}
            for salt, (name, fn) in enumerate(order if r % 2 == 0 else order[::-1]):
                got[name], rates = fn(eng, prompts(r, n, salt + 2 * n), args.tokens, sampling)
                tps[name].append(got[name])
                steps[name] += [1000 / x for x in rates if x > 0]
            ratios.append(got["batched"] / got["sequential"])
        print(
            f"{n} prompts x {args.tokens} tokens ({args.sampling} sampling): "
            f"batched {fmt(tps['batched'])} tok/s, "
            f"one after another {fmt(tps['sequential'])} tok/s, ratio per round "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
            f"decode step {fmt(steps['batched'])} ms for {n} rows, "
            f"{fmt(steps['sequential'])} ms alone"
        )
    waits = [admission(eng) for _ in range(args.rounds + 2)]
    print(f"new job while 8 rows decode: first token after {fmt(waits)} s")
    eng.close()


if __name__ == "__main__":
    main()
