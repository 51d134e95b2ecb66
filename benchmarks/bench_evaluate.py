"""An evaluation against the same generations run one by one, as a loop would.

Usage: python benchmarks/bench_evaluate.py [--rounds 3] [--rows 50] [--tokens 32]
                                           [--models default:q4,default:f32]

Two models (by default the bundled model at its two CPU precisions, two models of a
realistic size) × ``--rows`` rows, greedy, ``--tokens`` tokens each, result cache off:

- ``evaluate``: `mlx_notebook.evaluate` (each model's rows batched, models in turn);
- ``one by one``: the same requests, each submitted when the previous one ended (a
  ``for`` loop over ``generate``).

Both make the same texts (checked). Each round runs both, in an order that alternates
from round to round, so drift of a shared machine hits both alike; printed per round,
then the ratio one-by-one / evaluate as median (min-max) over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["MLX_NOTEBOOK_RESULT_CACHE"] = "off"  # timed runs run: no replays

import mlx_notebook  # noqa: E402 - first: it loads OpenBLAS before MLX
from mlx_notebook.engine import Engine, Request  # noqa: E402
from mlx_notebook.engine.backend import Route  # noqa: E402
from mlx_notebook.evaluation import EvalRun, plan  # noqa: E402,F401
from mlx_notebook.evaluation.plan import build  # noqa: E402

TOPICS = (
    "rivers", "volcanoes", "bread", "chess", "owls", "glaciers", "bicycles", "tea",
    "comets", "bees",
)  # fmt: skip


def rows(n: int) -> list[dict]:
    return [{"q": f"Write one sentence about {TOPICS[i % 10]} (note {i})."} for i in range(n)]


def by_evaluate(eng, data, models, tokens) -> tuple[float, list[str]]:
    p = build(data, "{q}", models, None, 1, lambda m: Route(eng, m), max_tokens=tokens,
              temperature=0.0)  # fmt: skip
    t = time.perf_counter()
    res = EvalRun(p).start().wait()
    return time.perf_counter() - t, [c.text for c in res.cells]


def one_by_one(eng, data, models, tokens) -> tuple[float, list[str]]:
    texts = []
    t = time.perf_counter()
    for m in models:
        for row in data:
            r = eng.submit(Request(row["q"], model=m, max_tokens=tokens, temperature=0.0))
            texts.append(r.result().text)
    return time.perf_counter() - t, texts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--models", default="default:q4,default:f32")
    args = ap.parse_args()
    models = args.models.split(",")
    data = rows(args.rows)
    eng = Engine()
    for m in models:  # load (and warm) each model before timing anything
        eng.submit(Request("hi", model=m, max_tokens=2)).result()
    print(
        f"{len(models)} models ({', '.join(models)}) x {args.rows} rows, {args.tokens} tokens, "
        f"greedy, on {eng.info().device}; mlx_notebook {mlx_notebook.__version__}",
        flush=True,
    )
    ratios = []
    for r in range(args.rounds):
        order = [by_evaluate, one_by_one] if r % 2 == 0 else [one_by_one, by_evaluate]
        got = {fn.__name__: fn(eng, data, models, args.tokens) for fn in order}
        (te, xe), (ts, xs) = got["by_evaluate"], got["one_by_one"]
        same = sum(a == b for a, b in zip(xe, xs))
        ratios.append(ts / te)
        print(
            f"round {r + 1}: evaluate {te:.1f} s, one by one {ts:.1f} s, "
            f"ratio {ratios[-1]:.2f}x; texts equal {same}/{len(xe)}",
            flush=True,
        )
    med = statistics.median(ratios)
    print(
        f"one by one / evaluate: median {med:.2f}x (min {min(ratios):.2f}, "
        f"max {max(ratios):.2f}) over {len(ratios)} rounds"
    )
    eng.close()


if __name__ == "__main__":
    main()
