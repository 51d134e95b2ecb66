"""What a schema costs: the grammar's mask per token, and decode speed with and without one.

Usage: python benchmarks/bench_structured.py [--rounds 5] [--tokens 48]

1. The mask alone: llguidance's allowed-token bitmask for the default model's
   vocabulary, unpacked and applied to a logits row, timed over a JSON object's
   generation (median microseconds per token, from a replayed greedy run).
2. Decode tok/s on the default model, greedy, --tokens tokens: a JSON Schema job
   against the same prompt unconstrained, in alternating order every round
   (median and min-max per side, and the median of the per-round ratios).
"""

import argparse
import statistics
import time

from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX
from mlx_notebook.engine.constraint import Constraint, grammar_info
from mlx_notebook.schema import Schema

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "mood": {"enum": ["pos", "neg", "neutral"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "mood", "tags"],
    "additionalProperties": False,
}
PROMPT = "Describe a person called Alice as JSON with her name, age, mood and tags: she is 31."


def mask_us(eng: Engine, ids: list[int]) -> float:
    """Median microseconds for one step's mask over a replay of ``ids``."""

    def work():
        import mlx.core as mx

        lm = eng.registry.get("default")
        width = lm.logits_size or lm.vocab_size
        c = Constraint(grammar_info(lm.tokenizer, width), Schema.of(SCHEMA).grammar, width)
        logits = mx.zeros((1, width))
        times = []
        for t in ids:
            t0 = time.perf_counter()
            mx.eval(c.mask(logits))
            times.append(time.perf_counter() - t0)
            c.consume([t])
        return statistics.median(times) * 1e6

    return eng.call(work).result()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    eng = Engine()
    base = dict(
        max_tokens=args.tokens, temperature=0, repetition_penalty=1, reuse_cache=False, batch=False
    )
    first = eng.submit(Request(PROMPT, schema=SCHEMA, **base)).result()  # load, warm up
    eng.submit(Request(PROMPT, **base)).result()
    print(f"mask per token: {mask_us(eng, first.token_ids):.0f} us (median over "
          f"{len(first.token_ids)} tokens of a JSON object)")  # fmt: skip
    sides = {"schema": [], "free": []}
    ratios = []
    for r in range(args.rounds):
        order = ["schema", "free"] if r % 2 == 0 else ["free", "schema"]
        got = {}
        for side in order:
            req = Request(PROMPT, schema=SCHEMA if side == "schema" else None, **base)
            got[side] = eng.submit(req).result().stats.generation_tps
            sides[side].append(got[side])
        ratios.append(got["schema"] / got["free"])
        print(f"round {r + 1}: schema {got['schema']:.1f} tok/s, free {got['free']:.1f} tok/s")
    for side, v in sides.items():
        print(f"{side}: median {statistics.median(v):.1f} tok/s ({min(v):.1f}-{max(v):.1f})")
    print(f"schema / free: median {statistics.median(ratios):.2f}x "
          f"({min(ratios):.2f}-{max(ratios):.2f}), {args.rounds} rounds")  # fmt: skip
    eng.close()


if __name__ == "__main__":
    main()
