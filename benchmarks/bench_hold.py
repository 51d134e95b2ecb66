"""Prefill with two chunk holds (`ChunkSizer.HOLD_S`) or growth limits, alternating in one process.

Usage:
    python benchmarks/bench_hold.py MODEL [--tokens 512] [--rounds 5] [--holds 2,4]
    python benchmarks/bench_hold.py MODEL [--tokens 512] [--rounds 5] --growth 4,16

MODEL is any spec the engine loads (bench_scale.py's 1B files are under
``$MLX_NOTEBOOK_CACHE/bench``).

``--holds``: one prefill first teaches the model's cost model; then each round
prefills the same prompt (``max_tokens=1``, no prompt cache) once with each hold, in
alternating order.

``--growth``: the first long prefill after a short chat, as a new session meets it
(and as bench_scale.py times it): two short chat turns teach the cost model their
chunks only, and before each prefill the model's cost model is put back to that state;
each round runs once with each `ChunkSizer.GATED_GROWTH` (how far past the measured a
chunk with cancel points may grow).

Prints each setting's tok/s and chunks, and the ratio of the second to the first,
paired by round: median (min–max).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
from pathlib import Path

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")

TEXT = Path(__file__).resolve().parent.parent / "README.md"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=512, help="prompt tokens")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--holds", default="2,4", help="two HOLD_S values, in seconds")
    ap.add_argument("--growth", help="two GATED_GROWTH values, each prefill the first")
    args = ap.parse_args()
    first = args.growth is not None
    values = [float(v) for v in (args.growth or args.holds).split(",")]

    from mlx_notebook.engine import Engine, Request
    from mlx_notebook.engine.decoding import layer_gates, prefill

    eng = Engine.default()
    greedy = dict(model=args.model, temperature=0, repetition_penalty=1)
    eng.submit(Request("hi", max_tokens=2, **greedy)).result()
    tok = eng.registry.peek(args.model).tokenizer
    prompt = tok.decode(tok.encode(TEXT.read_text())[: args.tokens])
    once = dict(greedy, chat=False, max_tokens=1, reuse_cache=False)
    if first:  # a chat's second short turn, as bench_scale.py's decode run
        eng.submit(Request("Write a short poem about the sea.", max_tokens=8, **greedy)).result()
    else:
        eng.submit(Request(prompt, **once)).result()  # the cost model learns the long chunks
    state = next(iter(eng.scheduler.states.values()))  # the one model's (engine-internal)
    if first:  # GATED_GROWTH sizes only chunks with cancel points between layers
        from mlx_lm.models.cache import make_prompt_cache  # after mlx_notebook: OpenBLAS

        model = eng.registry.peek(args.model).model
        if layer_gates.points(model, make_prompt_cache(model)) <= 1:
            raise SystemExit("--growth: this model's chunks have no cancel points")
    taught = copy.deepcopy(state.prefill)
    runs: dict[float, list] = {v: [] for v in values}
    for i in range(args.rounds):
        for v in values if i % 2 == 0 else values[::-1]:
            if first:
                state.prefill = copy.deepcopy(taught)
                prefill.ChunkSizer.GATED_GROWTH = v
            else:
                prefill.ChunkSizer.HOLD_S = v  # read at each chunk
            chunks: list[int] = []  # the profile's deque is capped: count as observed
            prof = state.prefill

            def counted(n, pos, seconds, record=prof.observe, chunks=chunks):
                chunks.append(n)
                record(n, pos, seconds)

            prof.observe = counted
            st = eng.submit(Request(prompt, **once)).result().stats
            del prof.observe  # back to the class's method
            runs[v].append((st.prompt_tps, chunks))
    name = "growth" if first else "hold"
    for v in values:
        tps = [t for t, _ in runs[v]]
        shapes = sorted({tuple(c) for _, c in runs[v]})
        print(f"{name} {v:g}: {statistics.median(tps):.1f} tok/s ({min(tps):.1f}–{max(tps):.1f}),"
              f" chunks {', '.join(str(list(c)) for c in shapes)}")  # fmt: skip
    ratios = [b[0] / a[0] for a, b in zip(runs[values[0]], runs[values[1]])]
    print(
        f"{name} {values[1]:g} / {values[0]:g}: {statistics.median(ratios):.3f}x "
        f"({min(ratios):.3f}–{max(ratios):.3f}, {len(ratios)} pairs)"
    )
    eng.close()


if __name__ == "__main__":
    main()
