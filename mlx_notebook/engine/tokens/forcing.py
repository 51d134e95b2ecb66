"""Forcing or forbidding one token in a logits row (for position-keyed logits processors).

A branch's first token (`branching`) and a thinking model's end marker
(`reasoning.EndThinking`) are both processors that act at one position, known
from the context's length, the same on every job path.
"""

from __future__ import annotations

import mlx.core as mx


def only(logits: mx.array, token: int) -> mx.array:
    """``logits`` with every token but ``token`` at -inf."""
    hit = mx.arange(logits.shape[-1]) == token
    return mx.where(hit, logits, mx.array(-float("inf"), logits.dtype))


def without(logits: mx.array, token: int) -> mx.array:
    """``logits`` with ``token`` at -inf."""
    hit = mx.arange(logits.shape[-1]) == token
    return mx.where(hit, mx.array(-float("inf"), logits.dtype), logits)
