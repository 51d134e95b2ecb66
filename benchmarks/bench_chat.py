"""Chat turns on the bundled default model: what each turn prefills, and its TTFT.

Usage: python benchmarks/bench_chat.py [--repeats 3]

Runs a 10-turn conversation `repeats` times, alternating with the same
conversation sent with the prompt cache off (every turn prefilled from scratch),
and prints per turn: prompt tokens, tokens reused, tokens prefilled, and the
median TTFT with and without the cache.
"""

import argparse
import os
import statistics

from mlx_notebook.chat.conversation import Chat
from mlx_notebook.engine import Engine, Request

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

QUESTIONS = [
    "Name a river in Europe.", "Where does it flow?", "Name a mountain there.",
    "How high is it?", "Name a city nearby.", "What is it known for?",
    "Name a food from there.", "How is it made?", "Name a festival there.",
    "When does it happen?",
]  # fmt: skip


def conversation(engine, cached: bool) -> list[tuple]:
    c = Chat(backend=engine, max_tokens=24, reuse_cache=cached, temperature=0, repetition_penalty=1)
    out = []
    for q in QUESTIONS:
        s = c.send(q).wait().stats
        out.append((s.prompt_tokens, s.cached_tokens, s.ttft_s))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    eng = Engine.default()
    eng.submit(Request("hi", max_tokens=2)).result()
    runs = {True: [], False: []}
    for _ in range(args.repeats):
        for cached in (True, False):
            runs[cached].append(conversation(eng, cached))
    print("turn  prompt  reused  prefilled  TTFT cached  TTFT uncached (median s)")
    for t in range(len(QUESTIONS)):
        p, c, _ = runs[True][0][t]
        ttc = statistics.median(r[t][2] for r in runs[True])
        ttu = statistics.median(r[t][2] for r in runs[False])
        print(f"{t + 1:4d}  {p:6d}  {c:6d}  {p - c:9d}  {ttc:11.3f}  {ttu:13.3f}")


if __name__ == "__main__":
    main()
