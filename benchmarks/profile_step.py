"""Where a decode step and a prefill chunk spend their time, per part of the model.

Usage: python benchmarks/profile_step.py [--context 512] [--chunk 256] [--runs 5] [--rows 1]
    [--model default:q4]

On the bundled default model as the engine loads it (on CPU: float32, the fast
path on unless MLX_NOTEBOOK_FAST=0), on the engine's worker thread. Each part
(embedding, norms, the q/k/v and output projections, RoPE, the attention
itself, the MLP's projections and its SwiGLU, the residual adds, the LM head)
is timed by evaluating its output before the next part starts, so MLX cannot
overlap or fuse across parts: the parts add up to a little more than a normal
step, which is printed too. Figures are medians over ``--runs``. With ``--rows B`` the
decode step is a batched one: B rows, each with its own context (mlx-lm's
``KVCache.merge`` of B caches, as the engine batches rows).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

from mlx_notebook.engine import Engine, Request  # first: it loads OpenBLAS before MLX

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

ATTN_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj", "rope")
MLP_PARTS = ("gate_proj", "up_proj", "down_proj")


class Timed:
    """Calls ``fn``, evaluates its output, and adds the seconds to ``book[name]``."""

    def __init__(self, fn, name: str, book: dict) -> None:
        self.fn, self.name, self.book = fn, name, book

    def __call__(self, *args, **kwargs):
        import mlx.core as mx

        # Inputs first: work still pending upstream (the attention itself, SwiGLU)
        # belongs to the enclosing part, not to this one.
        mx.eval([a for a in args if isinstance(a, mx.array)])
        t0 = time.perf_counter()
        out = self.fn(*args, **kwargs)
        mx.eval(out)
        self.book[self.name] += time.perf_counter() - t0
        return out

    def __getattr__(self, name):  # a wrapped module's own attributes stay reachable
        return getattr(self.fn, name)


def instrument(model, book: dict) -> None:
    """Wrap the parts of every layer (in place)."""
    inner = model.model
    inner.embed_tokens = Timed(inner.embed_tokens, "embedding", book)
    inner.norm = Timed(inner.norm, "final norm", book)
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for part in ATTN_PARTS:
            if hasattr(attn, part):
                setattr(attn, part, Timed(getattr(attn, part), f"attn.{part}", book))
        for part in MLP_PARTS:
            if hasattr(mlp, part):
                setattr(mlp, part, Timed(getattr(mlp, part), f"mlp.{part}", book))
        layer.input_layernorm = Timed(layer.input_layernorm, "norms", book)
        layer.post_attention_layernorm = Timed(layer.post_attention_layernorm, "norms", book)
        layer.self_attn = Timed(attn, "attn (whole)", book)
        layer.mlp = Timed(mlp, "mlp (whole)", book)
    inner.layers = [Timed(layer, "layer (whole)", book) for layer in inner.layers]


def breakdown(book: dict, total: float) -> dict[str, float]:
    """Exclusive times: each whole minus its parts."""
    attn_parts = sum(book[f"attn.{p}"] for p in ATTN_PARTS)
    mlp_parts = sum(book[f"mlp.{p}"] for p in MLP_PARTS)
    out = {
        "embedding": book["embedding"],
        "norms (RMSNorm)": book["norms"] + book["final norm"],
        "q/k/v projections": sum(book[f"attn.{p}"] for p in ("q_proj", "k_proj", "v_proj")),
        "RoPE": book["attn.rope"],
        "attention (scores, softmax, values)": book["attn (whole)"] - attn_parts,
        "output projection": book["attn.o_proj"],
        "gate/up projections": book["mlp.gate_proj"] + book["mlp.up_proj"],
        "SwiGLU": book["mlp (whole)"] - mlp_parts,
        "down projection": book["mlp.down_proj"],
        "residual adds": book["layer (whole)"]
        - book["attn (whole)"]
        - book["mlp (whole)"]
        - book["norms"],
    }
    out["LM head and the rest"] = total - sum(out.values())
    return out


def profile(lm, context: int, chunk: int, runs: int, rows: int = 1):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, make_prompt_cache, trim_prompt_cache

    model = lm.model
    ids = mx.array([[(7 * i) % 20000 + 100 for i in range(context + chunk)]])
    step_ids = mx.concatenate([ids[:, context : context + 1]] * rows)

    def fresh_cache(n=1):
        caches = []
        for r in range(n):
            cache = make_prompt_cache(model)
            mx.eval(model((ids[:, :context] + r) % 20000, cache=cache))
            caches.append(cache)
        if n == 1:
            return caches[0]
        merged = [KVCache.merge([c[i] for c in caches]) for i in range(len(caches[0]))]
        # The first step after a merge grows every layer's buffer (once per merge, not
        # per step): take it here, then step back.
        mx.eval(model(step_ids, cache=merged))
        trim_prompt_cache(merged, 1)
        return merged

    def timed_runs(book=None):
        dec, pre = [], []
        for _ in range(runs):
            cache = fresh_cache(rows)
            if book is not None:
                book.clear()
            t0 = time.perf_counter()
            mx.eval(model(step_ids, cache=cache))
            dec.append((time.perf_counter() - t0, dict(book or {})))
            cache = fresh_cache()
            if book is not None:
                book.clear()
            t0 = time.perf_counter()
            mx.eval(model(ids[:, context : context + chunk], cache=cache))
            pre.append((time.perf_counter() - t0, dict(book or {})))
        return dec, pre

    plain_dec, plain_pre = timed_runs()
    book: dict = defaultdict(float)
    saved = {k: getattr(model.model, k) for k in ("embed_tokens", "norm", "layers")}
    saved_layers = [
        (layer, layer.self_attn, layer.mlp, layer.input_layernorm,
         layer.post_attention_layernorm,
         {p: getattr(layer.self_attn, p) for p in ATTN_PARTS if hasattr(layer.self_attn, p)},
         {p: getattr(layer.mlp, p) for p in MLP_PARTS if hasattr(layer.mlp, p)})
        for layer in model.model.layers
    ]  # fmt: skip
    instrument(model, book)
    try:
        dec, pre = timed_runs(book)
    finally:
        for k, v in saved.items():
            setattr(model.model, k, v)
        for layer, attn, mlp, n1, n2, ap, mp in saved_layers:
            layer.self_attn, layer.mlp = attn, mlp
            layer.input_layernorm, layer.post_attention_layernorm = n1, n2
            for p, v in ap.items():
                setattr(attn, p, v)
            for p, v in mp.items():
                setattr(mlp, p, v)
    return plain_dec, plain_pre, dec, pre


def report(title: str, plain, timed) -> None:
    normal = statistics.median(t for t, _ in plain)
    total = statistics.median(t for t, _ in timed)
    parts = [breakdown(defaultdict(float, b), t) for t, b in timed]
    print(f"\n{title}: {normal * 1e3:.1f} ms as usual; {total * 1e3:.1f} ms with every part timed")
    for name in parts[0]:
        ms = statistics.median(p[name] for p in parts) * 1e3
        print(f"  {name:38s} {ms:8.2f} ms  {ms / (total * 1e3):6.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=512, help="tokens already in the cache")
    ap.add_argument("--chunk", type=int, default=256, help="prefill chunk length")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1, help="batch rows of the decode step")
    ap.add_argument("--model", default="default", help="a model spec, e.g. default:q4")
    args = ap.parse_args()
    eng = Engine()
    eng.submit(Request("hi", max_tokens=1)).result()  # load the default model
    work = lambda: profile(  # noqa: E731
        eng.registry.get(args.model), args.context, args.chunk, args.runs, args.rows
    )
    plain_dec, plain_pre, dec, pre = eng.run_on_worker(work, timeout=1800)
    print(f"default model on {eng.info().device}, context {args.context}, runs {args.runs}")
    report(f"decode step (1 token, {args.rows} row(s))", plain_dec, dec)
    report(f"prefill chunk ({args.chunk} tokens)", plain_pre, pre)
    eng.close()


if __name__ == "__main__":
    main()
