"""Batched generation on the bundled default model: map() against one-after-another.

Usage: python benchmarks/bench_batch.py [--rounds 3] [--tokens 64]

Each round runs, in alternating order, the same short prompts as one `map` (the
engine decodes them together) and as jobs run alone one after another, for 8
and for 4 prompts. Every round uses prompts no earlier round used, so neither
side reuses the other's prompt cache beyond the shared chat-template prefix.
Prints the aggregate generated tok/s (wall time, prefill included) as median
(min-max) and the per-round ratio, then the time to first token of a job
submitted while 8 rows decode, against the batch's own step and chunk times.
"""

import argparse
import statistics
import time

import mlx_notebook
from mlx_notebook.engine import Engine, Request, Token

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


def batched(eng, ps, tokens) -> float:
    res = mlx_notebook.map(ps, max_tokens=tokens, backend=eng)
    return res.tps


def sequential(eng, ps, tokens) -> float:
    t0 = time.perf_counter()
    n = 0
    for p in ps:
        n += eng.submit(Request(p, max_tokens=tokens, batch=False)).result().stats.generation_tokens
    return n / (time.perf_counter() - t0)


def admission(eng, tokens=200) -> tuple[float, float]:
    """TTFT of a job submitted while 8 rows decode, and the batch's step time then."""
    eng.max_batch = 9
    rows = [eng.submit(Request(p, max_tokens=tokens)) for p in prompts(99, 8, 0)]
    for r in rows:
        next(e for e in r.events(detach=True) if isinstance(e, Token))
    t0 = time.perf_counter()
    n0 = sum(r.token_count for r in rows)
    time.sleep(1.0)
    step = 1.0 / ((sum(r.token_count for r in rows) - n0) / len(rows))
    new = eng.submit(Request("Name a colour.", max_tokens=4))
    t0 = time.perf_counter()
    next(e for e in new.events(detach=True) if isinstance(e, Token))
    ttft = time.perf_counter() - t0
    eng.cancel_all()
    for j in rows + [new]:
        j.wait()
    eng.max_batch = 8
    return ttft, step


def fmt(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    eng = Engine()
    eng.submit(Request("hi", max_tokens=2)).result()
    for n in (8, 4):
        tps = {"batched": [], "sequential": []}
        ratios = []
        for r in range(args.rounds):
            order = [("batched", batched), ("sequential", sequential)]
            got = {}
            for salt, (name, fn) in enumerate(order if r % 2 == 0 else order[::-1]):
                got[name] = fn(eng, prompts(r, n, salt + 2 * n), args.tokens)
                tps[name].append(got[name])
            ratios.append(got["batched"] / got["sequential"])
        print(
            f"{n} prompts x {args.tokens} tokens: batched {fmt(tps['batched'])} tok/s, "
            f"one after another {fmt(tps['sequential'])} tok/s, ratio per round "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    ttft, step = admission(eng)
    print(f"new job while 8 rows decode: first token after {ttft:.3f} s (step: {step:.3f} s)")
    eng.close()


if __name__ == "__main__":
    main()
