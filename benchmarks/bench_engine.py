"""Engine benchmark: speed vs mlx-lm, cancel latency, speculative vs normal.

Usage:
    python benchmarks/bench_engine.py                 # tiny random model (built in a temp dir)
    python benchmarks/bench_engine.py --model default # bundled SmolLM2-135M-Instruct
    python benchmarks/bench_engine.py --model PATH --draft DRAFT_SPEC

Prints (a) our decode tokens/s divided by mlx_lm.stream_generate's, measured
interleaved on one prompt; (b) cancel latency between tokens and mid-prefill;
(c) speculative/normal speed for prompt lookup (k = 2, 4, 8) and a draft model.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import mlx_notebook  # noqa: F401 - loads OpenBLAS first
from mlx_notebook.cpu import blas as _blas
from mlx_notebook.engine import Engine, Finished, PrefillProgress, Request, Token

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

COPY_PROMPT = (
    "Repeat this paragraph exactly, changing only the word 'river' to 'stream':\n\n"
    "The river winds through the valley, past the old mill and the stone bridge. In spring "
    "the river rises with melted snow, and children gather on its banks to watch the water "
    "rush by. In summer the river slows, and the fish rest in its deep, cool pools."
)


def decode_tps(times):
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else float("nan")


def ours(engine, model, prompt, n, chat=False, **kw):
    times = []
    job = engine.submit(
        Request(
            prompt,
            model=model,
            max_tokens=n,
            chat=chat,
            **{"temperature": 0, "repetition_penalty": 1, **kw},
        )
    )
    job.add_listener(lambda ev: isinstance(ev, Token) and times.append(time.perf_counter()))
    r = job.result()
    return decode_tps(times), r


def reference(engine, model, prompt, n):
    from mlx_lm import stream_generate

    lm = engine.call(lambda: engine.registry.get(model)).result()

    def run():
        times = []
        for _ in stream_generate(lm.model, lm.tokenizer, prompt, max_tokens=n):
            times.append(time.perf_counter())
        return decode_tps(times)

    return engine.call(run).result()


def bench_speed(engine, model, n, rounds):
    prompt = "Once upon a time, in a small village by the sea,"
    ours(engine, model, prompt, 8)  # warm-up
    reference(engine, model, prompt, 8)
    a, b = [], []
    for _ in range(rounds):  # interleaved, so drift hits both equally
        a.append(ours(engine, model, prompt, n)[0])
        b.append(reference(engine, model, prompt, n))
    ratio = statistics.median(x / y for x, y in zip(a, b))
    print(
        f"(a) decode tok/s: ours {statistics.median(a):.1f}, mlx_lm {statistics.median(b):.1f}"
        f" -> ratio {ratio:.3f} (median of {rounds} interleaved pairs; target >= 0.97)"
    )


def cancel_latency(engine, model, trials, step_s):
    between, prefill, chunk_target = [], [], 0.25
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 800
    for i in range(trials):
        job = engine.submit(
            Request("Count from 1 to 1000: 1, 2, 3, 4,", model=model, max_tokens=100000, chat=False)
        )
        stop_at, t_fin, t0 = 3 + i % 5, [], None
        job.add_listener(
            lambda ev, t_fin=t_fin: isinstance(ev, Finished) and t_fin.append(time.perf_counter())
        )
        for ev in job.events():
            if isinstance(ev, Token) and ev.index == stop_at:
                time.sleep(step_s * (i % 3) / 3)  # land at varied points inside a step
                t0 = time.perf_counter()
                job.cancel()
        if t0 is not None and job.finished.finish_reason == "cancelled":
            between.append(t_fin[0] - t0)
    for i in range(trials):
        job = engine.submit(
            Request(
                long_prompt, model=model, max_tokens=5, chat=False, prefill_target_s=chunk_target
            )
        )
        t_fin, seen = [], 0
        job.add_listener(
            lambda ev, t_fin=t_fin: isinstance(ev, Finished) and t_fin.append(time.perf_counter())
        )
        t0 = None
        for ev in job.events():
            if isinstance(ev, PrefillProgress) and ev.done > 0:
                seen += 1
                if seen == 2 + i % 3:
                    time.sleep(0.05 * (i % 4))  # land at varied points inside a chunk
                    t0 = time.perf_counter()
                    job.cancel()
        if t0 is not None and job.finished.finish_reason == "cancelled":
            prefill.append(t_fin[0] - t0)
    ms = lambda xs: f"median {1e3 * statistics.median(xs):.1f} ms, max {1e3 * max(xs):.1f} ms"  # noqa: E731
    print(
        f"(b) cancel latency between tokens: {ms(between)} over {len(between)} trials "
        f"(target <= one decode step {1e3 * step_s:.1f} ms + 20 ms)"
    )
    if prefill:
        print(
            f"    cancel latency mid-prefill:   {ms(prefill)} over {len(prefill)} trials "
            f"(target <= chunk {1e3 * chunk_target:.0f} ms + one decode step)"
        )


def bench_speculative(engine, model, draft, n):
    ours(engine, model, COPY_PROMPT, 4, chat=True)  # warm-up
    base_tps, base = ours(engine, model, COPY_PROMPT, n, chat=True)
    print(
        f"(c) speculative vs normal on a copy-heavy prompt, greedy, {n} tokens "
        f"(normal {base_tps:.1f} tok/s):"
    )
    modes = [("lookup", k) for k in (2, 4, 8)] + ([(draft, k) for k in (2, 4)] if draft else [])
    for spec, k in modes:
        tps, r = ours(
            engine, model, COPY_PROMPT, n, chat=True, draft=spec, num_draft_tokens=k, lookup_ngram=2
        )
        same = r.token_ids == base.token_ids
        name = "lookup" if spec == "lookup" else f"draft {spec}"
        print(
            f"    {name:<28} k={k}: {tps / base_tps:5.2f}x  acceptance "
            f"{(r.stats.acceptance_rate or 0):.0%}  identical text: {same}"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model spec (default: a tiny random model)")
    ap.add_argument("--draft", default=None, help="draft model spec for (c)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    model = args.model
    if model is None:
        from mlx_notebook.testing import build_tiny_model

        model = str(build_tiny_model(tempfile.mkdtemp(prefix="tiny-")))
    engine = Engine()
    print(
        f"model={model} device={engine.call(lambda: None).result() or engine.info().device}"
        f" blas={_blas.status()['active']} python={sys.version.split()[0]}"
    )
    bench_speed(engine, model, args.tokens, args.rounds)
    step = 1 / ours(engine, model, "Hello", 16)[0]
    cancel_latency(engine, model, args.trials, step)
    bench_speculative(engine, model, args.draft, args.tokens * 2)
    engine.close()


if __name__ == "__main__":
    main()
