"""Cancel points between the layers of a forward pass, for long prefill chunks.

MLX cannot abort a graph in flight, so without these a Stop waits for the whole
chunk, and chunks must be short enough to wait for: on a slow CPU, shorter than
the length that streams the weights well (on a 2-core machine a 1,500-token
prompt prefilled about 1.3x faster in chunks of 256 to 1,024 tokens than in the
~90-token chunks that a 0.25 s Stop target allows there).

Each layer of a model gets a subclass (one per layer class, as `cpu_layer` does)
that, while a `Gate` is open on the thread, hands its output to the gate. Every
``every`` layers the gate evaluates the hidden state and asks whether the job
was stopped; if so it raises `Aborted`, and the caller trims the layers already
fed (`CachedSequence.drop_partial`), so the cache again holds exactly the tokens
before the chunk. Only full-attention caches, one per layer, trim that way at any
length, so only they get cancel points (`points`); other models keep whole chunks.
Outside an open gate a layer costs one thread-local lookup more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import mlx.core as mx
import mlx.nn as nn

from ..cache.caches import always_trimmable

_local = threading.local()
_CLASSES: dict[type, type] = {}


class Aborted(Exception):
    """A gate found the job stopped partway through a forward pass."""


class Gate:
    """Evaluates every ``every``-th layer's output and stops the pass on request.

    Args:
        stop: Whether the job was stopped (must not raise or touch MLX state).
        every: Layers between cancel points.
        layers: Layers in the pass; no cancel point after the last (the pass ends).
    """

    def __init__(self, stop: Callable[[], bool], every: int, layers: int) -> None:
        self.stop, self.every, self.layers = stop, max(1, every), layers
        self.seen = 0  # layers passed
        self.points = 0  # cancel points reached: what tests count

    def passed(self, out) -> None:
        """Called by a gated layer with its output."""
        self.seen += 1
        if self.seen % self.every or self.seen >= self.layers:
            return
        outs = out if isinstance(out, (tuple, list)) else [out]
        mx.eval([x for x in outs if isinstance(x, mx.array)])
        self.points += 1
        if self.stop():
            raise Aborted


def _layers(model) -> list | None:
    layers = getattr(model, "layers", None)
    if not isinstance(layers, list) or not layers:
        return None
    return layers if all(isinstance(x, nn.Module) for x in layers) else None


def points(model, cache) -> int:
    """Cancel points a chunk of ``model`` over ``cache`` can have: its layer count, or 0.

    0 unless every layer has one full-attention cache (they roll back in O(1)).
    """
    layers = _layers(model)
    if layers is None or len(layers) != len(cache) or not always_trimmable(cache):
        return 0
    return len(layers)


def _gated_class(base: type) -> type:
    """``base`` that shows its output to the thread's open gate (one subclass per base)."""
    if base not in _CLASSES:
        call = base.__call__

        def __call__(self, *args, **kwargs):
            out = call(self, *args, **kwargs)
            gate = getattr(_local, "gate", None)
            if gate is not None:
                gate.passed(out)
            return out

        _CLASSES[base] = type(f"Gated{base.__name__}", (base,), {"__call__": __call__})
    return _CLASSES[base]


def install(model) -> None:
    """Give each of ``model``'s layers its gated subclass (idempotent)."""
    for layer in _layers(model) or ():
        if type(layer) not in _CLASSES.values():
            layer.__class__ = _gated_class(type(layer))


@contextmanager
def opened(stop: Callable[[], bool], every: int, layers: int) -> Iterator[Gate]:
    """A `Gate` for the forward passes run on this thread inside the block."""
    gate, before = Gate(stop, every, layers), getattr(_local, "gate", None)
    _local.gate = gate
    try:
        yield gate
    finally:
        _local.gate = before


__all__ = ["Aborted", "Gate", "install", "opened", "points"]
