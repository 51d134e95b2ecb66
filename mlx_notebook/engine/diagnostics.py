"""Model-side diagnostics the notebook layer asks for (worker thread only)."""

from __future__ import annotations

from collections.abc import Sequence

from ..models.registry import LoadedModel
from .prompt import encode_prompt
from .request import Request


def top2_margin(lm: LoadedModel, request: Request, generated: Sequence[int]) -> float:
    """Gap between the two largest logits after the prompt and ``generated``.

    A small gap at the token where two decodings part means a numerical near-tie,
    not a bug.
    """
    import mlx.core as mx

    ids = encode_prompt(request, lm.tokenizer) + list(generated)
    logits = lm.model(mx.array([ids]))[0, -1].astype(mx.float32)
    top = mx.sort(logits)[-2:].tolist()
    return top[1] - top[0]
