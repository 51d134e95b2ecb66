"""The CPU fast path's model half: fewer, fused graph nodes for norms and RoPE.

MLX's CPU backend has no native kernels for ``mx.fast.rms_norm`` and
``mx.fast.rope``: they run as their reference decompositions, about 13 and 32
graph nodes per call, and each node costs a few microseconds to dispatch. On a
135M model that is half of a decode step's 4,200 nodes. At load, on CPU only,
each ``nn.RMSNorm`` and plain ``nn.RoPE`` module is swapped for one computing
the same function with fewer nodes: a compiled (fused) RMSNorm, and RoPE from a
precomputed cos/sin table. mlx-lm's model code and weights are unchanged.

``MLX_NOTEBOOK_FAST=0`` turns this off (with the sgemv shim, see ``_gemv.c``).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .._native import fast_enabled


def _rms(eps: float):
    def norm(x: mx.array, w: mx.array) -> mx.array:
        return x * mx.rsqrt(mx.mean(mx.square(x), axis=-1, keepdims=True) + eps) * w

    return mx.compile(norm)


class FusedRMSNorm(nn.Module):
    """``nn.RMSNorm`` as one compiled function (the same weight and epsilon).

    Args:
        weight: The scale.
        eps: Added to the mean square.
    """

    def __init__(self, weight: mx.array, eps: float) -> None:
        super().__init__()
        self.weight = weight
        self.eps = eps
        self._fn = _rms(eps)

    def __call__(self, x: mx.array) -> mx.array:
        """Normalize the last axis of ``x`` and scale it."""
        return self._fn(x, self.weight)


def _rotate_traditional(x, cos, sin):
    # Adjacent pairs (x0, x1) rotate together, as llama.cpp lays out Q and K.
    shape = x.shape
    x = x.reshape(*shape[:-1], shape[-1] // 2, 2)
    x1, x2 = x[..., 0], x[..., 1]
    return mx.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(shape)


def _rotate_halves(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return mx.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


_ROTATE = {True: mx.compile(_rotate_traditional), False: mx.compile(_rotate_halves)}


class RopeTable:
    """cos and sin of every position's angles for one RoPE configuration, grown on demand.

    Args:
        dims: Rotated feature dimensions.
        base: Frequency base.
        scale: Position scale.
    """

    def __init__(self, dims: int, base: float, scale: float) -> None:
        self.dims, self.base, self.scale = dims, base, scale
        self.size = 0
        self.grow(2048)

    def grow(self, need: int) -> None:
        """Cover positions up to ``need`` (at least doubling)."""
        if need <= self.size:
            return
        size = max(need, 2 * self.size)
        inv = 1.0 / (self.base ** (mx.arange(0, self.dims, 2, dtype=mx.float32) / self.dims))
        theta = (mx.arange(size, dtype=mx.float32) * self.scale)[:, None] * inv[None, :]
        self.cos, self.sin = mx.cos(theta), mx.sin(theta)
        mx.eval(self.cos, self.sin)
        self.size = size

    @property
    def nbytes(self) -> int:
        """Bytes of the two tables."""
        return self.cos.nbytes + self.sin.nbytes


class TableRoPE(nn.Module):
    """``nn.RoPE`` from a cos/sin table of every position.

    Args:
        dims: Rotated feature dimensions (the rest pass through).
        traditional: Rotate adjacent pairs (True) or the two halves.
        base: Frequency base.
        scale: Position scale.
        table: A table to share (layers of one model share one); a new one when None.
    """

    def __init__(
        self,
        dims: int,
        traditional: bool,
        base: float,
        scale: float,
        table: RopeTable | None = None,
    ) -> None:
        super().__init__()
        self.dims, self.traditional, self.base, self.scale = dims, traditional, base, scale
        self._table = table or RopeTable(dims, base, scale)

    def __call__(self, x: mx.array, offset: int = 0) -> mx.array:
        """Rotate ``x`` (..., L, D) for positions ``offset`` .. ``offset + L - 1``."""
        n = x.shape[-2]
        t = self._table
        t.grow(offset + n)
        cos = t.cos[offset : offset + n].astype(x.dtype)
        sin = t.sin[offset : offset + n].astype(x.dtype)
        rotate = _ROTATE[self.traditional]
        if self.dims == x.shape[-1]:
            return rotate(x, cos, sin)
        head = rotate(x[..., : self.dims], cos, sin)
        return mx.concatenate([head, x[..., self.dims :]], axis=-1)


def _replacement(module, tables: dict):
    if isinstance(module, nn.RMSNorm):
        return FusedRMSNorm(module.weight, module.eps)
    if type(module) is nn.RoPE:  # subclasses (scaled variants) compute other things
        key = (module.dims, module.base, module.scale)
        if key not in tables:
            tables[key] = RopeTable(*key)
        return TableRoPE(module.dims, module.traditional, *key[1:], table=tables[key])
    return None


def _swap(module, counts: dict, tables: dict) -> None:
    for name, child in module.children().items():
        items = enumerate(child) if isinstance(child, list) else [(None, child)]
        for i, sub in items:
            if not isinstance(sub, nn.Module):
                continue
            new = _replacement(sub, tables)
            if new is None:
                _swap(sub, counts, tables)
                continue
            counts[type(sub).__name__] = counts.get(type(sub).__name__, 0) + 1
            if i is None:
                setattr(module, name, new)
            else:
                child[i] = new


def apply(model, device: str) -> list[str]:
    """Swap in the fused modules when ``device`` is the CPU and the fast path is on.

    Args:
        model: An mlx-lm model.
        device: ``"cpu"`` or ``"gpu"``; GPUs have native kernels and are left alone.

    Returns:
        What was swapped, e.g. ``["61 RMSNorm", "30 RoPE"]`` (empty when nothing was).
    """
    if device != "cpu" or not fast_enabled():
        return []
    counts: dict[str, int] = {}
    _swap(model, counts, {})
    return [f"{n} {name}" for name, n in sorted(counts.items())]


def buffer_bytes(model) -> int:
    """Bytes the fast path added to ``model`` beside its parameters (the RoPE tables)."""
    tables = {id(m._table): m._table for _, m in model.named_modules() if isinstance(m, TableRoPE)}
    return sum(t.nbytes for t in tables.values())
