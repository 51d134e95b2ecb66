"""What a schema costs, and what its fast paths buy, on the default model (greedy).

Usage: python benchmarks/bench_structured.py [--rounds 5] [--tokens 48] [--rows 50]
       [--only mask,decode,forced,choice,sample] [--batch]

1. mask: llguidance's allowed-token bitmask for the default model's vocabulary,
   unpacked and applied to a logits row, timed over a JSON object's generation
   (median microseconds per token, from a replayed greedy run).
2. decode: tok/s of a JSON Schema job with every token masked (``fast=False``:
   what the mask itself costs) against the same prompt unconstrained.
3. forced: one JSON object (a bounded 4-field schema) alone, forced tokens fed
   in one pass (``Schema.fast``) against masking every token (``fast=False``):
   seconds after the first token, and forward passes.
4. choice: ``map`` over --rows short texts with four labels, the choice path
   (token sequences compared, forced tails free) against the same choices as a
   token-by-token mask: wall seconds per row and decode steps per row.
5. sample: every schema of the committed real-world sample (benchmarks/schemas/,
   see its SOURCES.md) as a job with its defaults (jump-forward on, the batch path a
   job submitted alone takes) against the same prompt unconstrained: decode tok/s
   per schema, the median of per-schema ratios, tokens per forward pass, and the
   grammar's own time per pass (the job's tokens replayed through llguidance).

Sides alternate in order every round; each prints median and min-max per side
and the median of the per-round ratios.
"""

import argparse
import dataclasses
import os
import statistics
import time

import mlx_notebook
from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX
from mlx_notebook.engine.tokens.constraint import Constraint, grammar_info
from mlx_notebook.schema import Schema

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

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
# Bounded, as one bounds a small model's answers: the object ends inside the budget.
BOUNDED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "mood": {"enum": ["pos", "neg", "neutral"]},
        "hobbies": {
            "type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3
        },
    },
    "required": ["name", "age", "mood", "hobbies"],
    "additionalProperties": False,
}  # fmt: skip
PROMPT = "Describe a person called Alice as JSON with her name, age, mood and tags: she is 31."


def mask_us(eng: Engine, ids: list[int]) -> float:
    """Median microseconds for one step's mask over a replay of ``ids``."""

    def work():
        import mlx.core as mx

        lm = eng.registry.get("default")
        width = lm.logits_size or lm.vocab_size
        info = grammar_info(lm.tokenizer, width)
        c = Constraint(info, Schema.of(SCHEMA).grammar, width, jump=False)  # every mask in full
        logits = mx.zeros((1, width))
        times = []
        for t in ids:
            t0 = time.perf_counter()
            mx.eval(c.mask(logits))
            times.append(time.perf_counter() - t0)
            c.consume([t])
        return statistics.median(times) * 1e6

    return eng.call(work).result()


NAMES = ["Ann", "Bob", "Cai", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo"]
MOODS = ["cheerful", "grumpy", "calm"]
LABELS = ["cheerful", "grumpy", "calm", "mixed feelings"]
CHOICE_TEMPLATE = "How does this person feel: cheerful, grumpy, calm or mixed feelings? {text}"


def rounds(n: int, sides: dict, run) -> None:
    """Run ``run(side) -> value`` for each side in alternating order; print the summary."""
    got = {k: [] for k in sides}
    ratios = []
    names = list(sides)
    for r in range(n):
        order = names if r % 2 == 0 else names[::-1]
        this = {}
        for side in order:
            this[side] = run(side)
            got[side].append(this[side])
        ratios.append(this[names[0]] / this[names[1]])
        print(f"round {r + 1}: " + ", ".join(f"{k} {this[k]:.3f} {sides[k]}" for k in names))
    for k, v in got.items():
        print(f"{k}: median {statistics.median(v):.3f} {sides[k]} ({min(v):.3f}-{max(v):.3f})")
    print(f"{names[0]} / {names[1]}: median {statistics.median(ratios):.2f}x "
          f"({min(ratios):.2f}-{max(ratios):.2f}), {n} rounds")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--only", default="mask,decode,forced,choice")
    ap.add_argument("--sample-tokens", type=int, default=64)
    ap.add_argument(
        "--batch", action="store_true",
        help="jobs take the batch path, as a job submitted alone does by default",
    )  # fmt: skip
    args = ap.parse_args()
    parts = set(args.only.split(","))
    eng = Engine()
    base = dict(
        max_tokens=args.tokens, temperature=0, repetition_penalty=1, reuse_cache=False,
        batch=args.batch,
    )  # fmt: skip
    first = eng.submit(Request(PROMPT, schema=SCHEMA, **base)).result()  # load, warm up
    eng.submit(Request(PROMPT, **base)).result()
    if "mask" in parts:
        print(f"mask per token: {mask_us(eng, first.token_ids):.0f} us (median over "
              f"{len(first.token_ids)} tokens of a JSON object)")  # fmt: skip
    if "decode" in parts:
        print("-- decode tok/s, every token masked (fast paths off) vs free")
        masked = dataclasses.replace(Schema.of(SCHEMA), fast=False)

        def decode(side):
            req = Request(PROMPT, schema=masked if side == "schema" else None, **base)
            return eng.submit(req).result().stats.generation_tps

        rounds(args.rounds, {"schema": "tok/s", "free": "tok/s"}, decode)
    if "forced" in parts:
        print("-- one JSON object alone: forced tokens in one pass vs every token masked")
        fast = Schema.of(BOUNDED)
        schemas = {"forced": fast, "masked": dataclasses.replace(fast, fast=False)}
        full = dict(base, max_tokens=200)

        def forced(side):
            r = eng.submit(Request(PROMPT, schema=schemas[side], **full)).result()
            st = r.stats
            print(f"  {side}: {len(r.token_ids)} tokens, {st.decode_steps} passes, "
                  f"{r.finish_reason}")  # fmt: skip
            return st.total_s - st.ttft_s

        rounds(args.rounds, {"forced": "s", "masked": "s"}, forced)
    if "choice" in parts:
        import pandas as pd

        print(f"-- {args.rows} rows classified: choice path vs token-by-token mask")
        texts = [
            f"{NAMES[i % 10]} is {20 + i} years old and feels {MOODS[i % 3]} today."
            for i in range(args.rows)
        ]
        df = pd.DataFrame({"text": texts})
        fast = Schema.choice(LABELS)
        schemas = {"choice": fast, "masked": dataclasses.replace(fast, fast=False)}
        kw = dict(max_tokens=8, temperature=0, repetition_penalty=1, reuse_cache=False)

        def choice(side):
            t0 = time.perf_counter()
            res = mlx_notebook.map(df, CHOICE_TEMPLATE, schema=schemas[side], backend=eng, **kw)
            wall = time.perf_counter() - t0
            steps = sum(r.stats.decode_steps for r in res) / len(res)
            bad = sum(t not in LABELS for t in res.texts)
            print(f"  {side}: {steps:.2f} decode steps per row, {bad} answers off the list")
            return wall / args.rows

        rounds(args.rounds, {"choice": "s/row", "masked": "s/row"}, choice)
    if "sample" in parts:
        sample(eng, args.rounds, args.sample_tokens)
    eng.close()


def grammar_ms(eng: Engine, schema: Schema, ids: list[int]) -> tuple[float, int]:
    """The grammar's own milliseconds per forward pass over a replay of ``ids``, and passes.

    What a job's constraint does at each pass: take the forced tokens, mask the
    logits row, consume the sampled token.
    """

    def work():
        import mlx.core as mx

        lm = eng.registry.get("default")
        width = lm.logits_size or lm.vocab_size
        c = Constraint(grammar_info(lm.tokenizer, width), schema.grammar, width)
        logits = mx.zeros((1, width))
        spent, passes, i = 0.0, 0, 0
        while i < len(ids):
            t0 = time.perf_counter()
            while i < len(ids) and c.take_forced() == ids[i]:
                i += 1
            if i < len(ids):
                mx.eval(c.mask(logits))
                c.consume([ids[i]])
                i += 1
            spent += time.perf_counter() - t0
            passes += 1
        return spent * 1e3 / max(passes, 1), passes

    return eng.call(work).result()


def sample(eng: Engine, n_rounds: int, tokens: int) -> None:
    """Constrained against unconstrained decode on every schema of benchmarks/schemas/."""
    import json
    from pathlib import Path

    files = sorted((Path(__file__).parent / "schemas").glob("*.json"))
    print(f"-- {len(files)} real-world schemas: schema job (defaults) vs the same prompt free")
    kw = dict(max_tokens=tokens, temperature=0, repetition_penalty=1, reuse_cache=False)
    ratios, per_pass, gram, short, step_ratios = [], [], [], [], []
    for f in files:
        doc = json.loads(f.read_text())
        schema = Schema.of(doc)
        what = doc.get("title") or doc.get("description") or f.stem.split("__")[-1]
        keys = ", ".join(list(doc.get("properties") or {})[:12])
        prompt = f"Write an example of this as JSON: {str(what)[:120]}" + (
            f". Fill in these fields: {keys}." if keys else "."
        )
        got = {"schema": [], "free": []}
        per_step = {"schema": [], "free": []}  # seconds per forward pass after the first
        last = None
        for r in range(n_rounds):
            for side in ("schema", "free") if r % 2 == 0 else ("free", "schema"):
                res = eng.submit(Request(prompt, schema=schema if side == "schema" else None, **kw))
                st = res.result().stats
                got[side].append(st.generation_tps)
                if st.generation_tps:
                    decode_s = (st.generation_tokens - 1) / st.generation_tps
                    per_step[side].append(decode_s / max(st.decode_steps - 1, 1))
                if side == "schema":
                    last = res.result()
        n, steps = len(last.token_ids), max(last.stats.decode_steps, 1)
        if n < 4:  # a finished value in a token or two ("{}"): no decode rate to compare
            short.append(f.stem)
            print(f"     -  {n:3d} tokens ({last.text!r}): left out  {f.stem[:60]}")
            continue
        ratio = statistics.median(a / b for a, b in zip(got["schema"], got["free"]))
        step_ratio = statistics.median(per_step["schema"]) / statistics.median(per_step["free"])
        ms, passes = grammar_ms(eng, schema, last.token_ids)
        ratios.append(ratio)
        step_ratios.append(step_ratio)
        per_pass.append(n / steps)
        gram.append(ms)
        print(f"  {ratio:5.2f}x (pass {step_ratio:4.2f}x)  {n:3d} tokens in {steps:3d} passes "
              f"({n / steps:4.2f}/pass), "
              f"grammar {ms:5.2f} ms/pass, valid={last.valid}  {f.stem[:60]}")  # fmt: skip
    q = statistics.quantiles(ratios, n=4)
    print(f"schema / free decode tok/s: median {statistics.median(ratios):.2f}x "
          f"(quartiles {q[0]:.2f}-{q[2]:.2f}, min {min(ratios):.2f}), {len(ratios)} of "
          f"{len(files)} schemas ({len(short)} too short to time), {n_rounds} rounds")  # fmt: skip
    print(f"seconds per forward pass, schema / free: median {statistics.median(step_ratios):.2f}x "
          f"({min(step_ratios):.2f}-{max(step_ratios):.2f})")  # fmt: skip
    print(f"tokens per forward pass (schema jobs): median {statistics.median(per_pass):.2f} "
          f"({min(per_pass):.2f}-{max(per_pass):.2f}); grammar per pass: median "
          f"{statistics.median(gram):.2f} ms ({min(gram):.2f}-{max(gram):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
