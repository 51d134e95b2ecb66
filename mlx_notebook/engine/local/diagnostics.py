"""What the engine reports about itself: status notes, models, device, logit margins."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...models.registry import LoadedModel, Registry
from ..decoding.device import on_cpu
from ..decoding.prompt import encode_prompt
from ..info import ModelInfo
from ..request import Request


def fork_point(
    lm: LoadedModel, request: Request, generated: Sequence[int], tokens: Sequence[int] = ()
) -> tuple[float, list[tuple[str, int, float, int]]]:
    """Where two decodings part: the top-2 logit margin, and each token's standing there.

    A small margin at the token where two decodings part means a numerical
    near-tie, not a bug.

    Returns:
        ``(margin, [(text, id, probability, rank), ...])`` for ``tokens``, under
        the model's own distribution after the prompt and ``generated``.
    """
    import math

    import mlx.core as mx

    from ..token_records import position_stats

    ids = encode_prompt(request, lm.tokenizer) + list(generated)
    logits = lm.model(mx.array([ids]))[0, -1:].astype(mx.float32)
    top = mx.sort(logits[0])[-2:].tolist()
    standing = []
    for t in tokens:  # the same statistics as every token record
        lp, rank, *_ = (c[0] for c in position_stats(logits, [t], 0))
        standing.append((lm.tokenizer.decode([t]), int(t), math.exp(lp), rank))
    return top[1] - top[0], standing


def status_notes(
    states: Mapping[str, Any], rows: Sequence[Any] = (), max_batch: int = 0, on: str | None = None
) -> list[str]:
    """Lines for ``%mlx status``: the batch, the CPU fast path, each model's caches and index.

    Args:
        states: Model name to its `ModelState`.
        rows: The batch's rows now (each with its ``job``).
        max_batch: Most rows a batch may hold (0 or 1: batching is off).
        on: The model the batch runs, if any.
    """
    if max_batch <= 1:
        notes = ["batching: off (max_batch <= 1): jobs run one at a time"]
    else:
        jobs = f" (jobs {', '.join(str(r.job.id) for r in rows)})" if rows else ""
        notes = [f"batch: {len(rows)} of {max_batch} rows{f' on {on}' if rows else ''}{jobs}"]
    if on_cpu():
        from ...cpu import status_lines

        notes += status_lines()
    else:
        notes.append("CPU fast path: not used (the GPU computes)")
    for name, state in list(states.items()):
        c, x = state.cache, state.suffix
        notes.append(
            f"prompt cache of {name}: {len(c)} entries, {c.nbytes / 2**20:.1f} MB "
            f"(budget {c.max_bytes / 2**20:.0f} MB)"
        )
        notes.append(
            f"suffix index of {name}: {len(x)} tokens in {len(x.docs)} documents, "
            f"{x.entries} n-grams (budget {x.max_tokens} tokens)"
        )
        if state.batching is not None:
            notes.append(f"batching of {name}: {state.batching}")
        if state.drafts is not None:
            notes.append(f"speculation on {name}: {state.drafts}")
        if state.layout is not None:
            notes.append(f"prefill of {name}: {state.layout}")
    return notes


def model_infos(registry: Registry) -> tuple[ModelInfo, ...]:
    """The loaded models, as the `Backend` protocol describes them."""
    return tuple(
        ModelInfo(
            m["name"],
            m["path"],
            m["memory_mb"],
            m["dtype"],
            m["vocab_size"],
            tuple(m["fast_path"]),
            dict(m.get("defaults") or {}),
        )  # fmt: skip
        for m in registry.snapshot()
    )


def describe_device(mx) -> str:
    """``"gpu (Metal)"``, ``"gpu"`` or ``"cpu"``: MLX's default device."""
    dev = mx.default_device()
    kind = "gpu" if dev.type == mx.DeviceType.gpu else "cpu"
    if kind == "gpu" and mx.metal.is_available():
        return "gpu (Metal)"
    return kind
