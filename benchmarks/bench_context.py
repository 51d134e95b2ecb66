"""Decode after a long prompt, side by side: our engine and llama.cpp, float32 and 4-bit.

Usage:
    python benchmarks/bench_context.py [--rounds 5] [--contexts 1000 2000] [--tokens 64]

`bench_cpu.py` decodes after a short chat prompt, where a step is almost all weight
products. After a long prompt every step also reads the whole KV cache: at 2,000
tokens of the default model that is 92 MB of float32 keys and values a step (its
float32 weights are 538 MB, its 4-bit ones about 80). Each process here prefills the
first N tokens of ``docs/performance-log.md`` (not timed) and then decodes ``--tokens``
greedy tokens, for each context in turn; rounds run the configurations in a rotated
order, and ratios are taken round by round (paired), then their median.

llama.cpp runs through llama-cpp-python with 2 threads, as in `bench_cpu.py`, on the
same f32 copy of the GGUF and on the Q4_1 file as shipped; it keeps its KV cache in
float16 (its default), ours is float32.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from bench_cpu import LLAMA_PLAIN, ROOT, add_llama_args, fmt, llama_env, llama_targets, run

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

SUFFIX = "\n\nSummarize the text above in three sentences."

OURS = r"""
import json, sys
import mlx_notebook
from mlx_notebook.engine import Engine, Request
text, n, spec = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
eng = Engine.default()
eng.submit(Request("hi", model=spec, max_tokens=2)).result()
tok = eng.registry.peek(spec).tokenizer
out = {}
for ctx in sys.argv[5:]:
    prompt = tok.decode(tok.encode(text)[: int(ctx)]) + sys.argv[4]
    r = eng.submit(Request(prompt, model=spec, chat=False, max_tokens=n, reuse_cache=False,
                           temperature=0, repetition_penalty=1)).result()
    out[ctx] = {"decode": r.stats.generation_tps, "prompt": r.stats.prompt_tokens,
                "tokens": len(r.token_ids)}
print(json.dumps(out))
"""

LLAMA = (
    r"""
import json, os, sys, time
import llama_cpp
from llama_cpp import Llama
"""
    + LLAMA_PLAIN
    + r"""
text, n, path = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
llm = Llama(model_path=path, n_threads=2, n_threads_batch=2, n_ctx=4096, n_batch=512,
            verbose=False)
out = {}
for ctx in sys.argv[5:]:
    ids = llm.tokenize(text.encode())[: int(ctx)]
    ids += llm.tokenize(sys.argv[4].encode(), add_bos=False)
    llm.reset()
    count, t_first = 0, None
    for _ in llm.generate(ids, temp=0.0, reset=True):
        count += 1
        if count == 1:
            t_first = time.perf_counter()
        if count >= n:
            break
    out[ctx] = {"decode": (count - 1) / (time.perf_counter() - t_first), "prompt": len(ids),
                "tokens": count}
print(json.dumps(out))
"""
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--contexts", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--tokens", type=int, default=64)
    add_llama_args(ap)
    args = ap.parse_args()

    import mlx_notebook  # noqa: F401 - OpenBLAS first
    from mlx_notebook.models.default import default_gguf

    text, py = str(ROOT / "docs" / "performance-log.md"), sys.executable
    tail = [str(args.tokens)]
    ctxs = [str(c) for c in args.contexts]
    configs = {
        "ours f32": [py, "-c", OURS, text, *tail, "default:f32", SUFFIX, *ctxs],
        "ours q4": [py, "-c", OURS, text, *tail, "default:q4", SUFFIX, *ctxs],
    }
    envs = {}
    for name, llama_py, path in llama_targets(args.llama_python, default_gguf()):
        configs[name] = [llama_py, "-c", LLAMA, text, *tail, str(path), SUFFIX, *ctxs]
        envs[name] = llama_env(args)
    names = list(configs)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            results[name].append(run(configs[name], envs.get(name)))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    for ctx in ctxs:
        print(f"\nDecode after {ctx} tokens of prompt ({args.tokens} tokens, greedy), "
              f"median over {args.rounds} rounds:")  # fmt: skip
        for name in names:
            print(f"  {name:16s} {fmt([x[ctx]['decode'] for x in results[name]], 'tok/s')}")
        for a, b in (("ours f32", "llama.cpp f32"), ("ours q4", "llama.cpp Q4_1")):
            if b in results:
                rs = [x[ctx]["decode"] / y[ctx]["decode"] for x, y in zip(results[a], results[b])]
                print(f"  {a} / {b}: {statistics.median(rs):.2f}x "
                      f"(min {min(rs):.2f}, max {max(rs):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
