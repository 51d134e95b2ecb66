"""How far prefill's 8-bit inputs move a quantized model's predictions, against 16 bits.

Usage:
    python benchmarks/bench_prefill_inputs.py [--model PATH] [--windows 16] [--length 512]
        [--continue 32] [--float PATH]

With ``MLX_NOTEBOOK_PREFILL_INT8=1`` (set here), a prefill pass's quantized products
round each unit of 32 inputs to 8 bits on CPUs with AVX-512 VNNI (as llama.cpp's Q4_0
products do); decode steps keep 16 bits. For windows of a long text (``--length``
tokens each, consecutive), the same quantized weights three ways:

- the reference: mlx-lm's model with every quantized layer dequantized to float32 (the
  function MLX's quantized kernels compute, in float), on MLX's own operations;
- ours with the prompt prefilled on 8-bit inputs, then decode steps;
- ours with it prefilled on 16-bit inputs (as every pass rounds them by default).

Reports, for each of ours: KL(reference || ours) of the next-token distribution after
the window (median, 90th percentile, max), how often its top token is the reference's,
and how many greedy continuations of ``--continue`` tokens equal the reference's (and
where the others first part). Default model: the bundled model's own 4-bit weights
(``default:q4``, its Q4_1 file as converted). With ``--float`` (the same model's
float weights: a directory or a GGUF file), also KL(float || reference): what the
4-bit weights themselves move the distribution, for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")
os.environ["MLX_NOTEBOOK_PREFILL_INT8"] = "1"  # what it measures (off by default)

import mlx_notebook  # noqa: E402, F401 - OpenBLAS first, as in the engine

TEXT = Path(__file__).resolve().parent.parent / "docs" / "performance-log.md"


def _reference(path: str):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.utils import dequantize_model

    model = dequantize_model(load(path)[0])
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model


def _run(model, ids: list[int], n: int, pass_ctx, tables) -> tuple:
    """Prefill ``ids[:-1]`` inside ``pass_ctx``, then decode greedily: (logprobs, n ids)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    for t in tables:
        t.grow(len(ids) + n + 1)
    cache = make_prompt_cache(model)
    with pass_ctx():
        mx.eval(model(mx.array([ids[:-1]]), cache=cache))
    y, out, first = ids[-1], [], None
    for _ in range(n):
        logits = model(mx.array([[y]]), cache=cache)[0, -1].astype(mx.float32)
        if first is None:
            first = logits - mx.logsumexp(logits)
        y = int(mx.argmax(logits).item())
        out.append(y)
    return first, out


def _kl(p_log, q_log) -> float:
    import mlx.core as mx

    return float(mx.sum(mx.exp(p_log) * (p_log - q_log)).item())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a quantized model directory (default: default:q4)")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--continue", dest="cont", type=int, default=32)
    ap.add_argument("--float", help="the same model's float weights (directory or .gguf)")
    args = ap.parse_args()

    from contextlib import nullcontext

    from mlx_notebook.engine import Engine, Request

    path = args.model
    if path is None:
        from mlx_notebook.models.default import default_gguf
        from mlx_notebook.models.gguf import convert_gguf

        path = str(convert_gguf(default_gguf(), "q"))
    floats = args.float
    if floats and floats.endswith(".gguf"):
        from mlx_notebook.models.gguf import convert_gguf

        floats = str(convert_gguf(floats, "f32"))
    eng = Engine.default()
    eng.submit(Request("hi", model=path, max_tokens=1)).result()

    def measure():
        import mlx.core as mx

        from mlx_notebook.cpu import ext
        from mlx_notebook.cpu.fast import rope_tables
        from mlx_notebook.cpu.quant import prefill_pass

        lm = eng.registry.peek(path)
        ours, tables = lm.model, rope_tables(lm.model)
        ref = _reference(path)
        flt = _reference(floats) if floats else None
        ids = lm.tokenizer.encode(TEXT.read_text())
        rows = []
        for w in range(args.windows):
            window = ids[w * args.length : (w + 1) * args.length]
            want, want_ids = _run(ref, window, args.cont, nullcontext, [])
            got8, ids8 = _run(ours, window, args.cont, prefill_pass, tables)
            got16, ids16 = _run(ours, window, args.cont, nullcontext, tables)
            top = int(mx.argmax(want).item())
            if flt is not None:
                rows.append({"weights": _kl(_run(flt, window, 1, nullcontext, [])[0], want)})
            rows.append(
                {
                    "kl8": _kl(want, got8),
                    "kl16": _kl(want, got16),
                    "top8": int(mx.argmax(got8).item()) == top,
                    "top16": int(mx.argmax(got16).item()) == top,
                    "part8": next(
                        (i for i, (a, b) in enumerate(zip(ids8, want_ids)) if a != b), None
                    ),
                    "part16": next(
                        (i for i, (a, b) in enumerate(zip(ids16, want_ids)) if a != b), None
                    ),
                }
            )
        return rows, ext.prefill_inputs8(), ext.status()

    rows, on, status = eng.run_on_worker(measure, timeout=None)
    print(f"model {path}\nextension: {status}")
    if not on:
        print("8-bit prefill inputs are not on here (no AVX-512 VNNI, or turned off)")
    weights = sorted(r["weights"] for r in rows if "weights" in r)
    rows = [r for r in rows if "weights" not in r]
    n = len(rows)
    print(f"{n} windows of {args.length} tokens, continuations of {args.cont}")
    for bits in ("8", "16"):
        kl = sorted(r["kl" + bits] for r in rows)
        parts = [r["part" + bits] for r in rows if r["part" + bits] is not None]
        print(
            f"prefill on {bits:>2}-bit inputs: KL median {statistics.median(kl):.2e}, "
            f"p90 {kl[int(0.9 * (n - 1))]:.2e}, max {kl[-1]:.2e}; top-1 = reference "
            f"{sum(r['top' + bits] for r in rows)}/{n}; continuations equal "
            f"{n - len(parts)}/{n} (the others part at tokens {sorted(parts)})"
        )
    if weights:
        print(
            f"the 4-bit weights themselves, KL(float || reference): median "
            f"{statistics.median(weights):.2e}, max {weights[-1]:.2e}"
        )


if __name__ == "__main__":
    main()
