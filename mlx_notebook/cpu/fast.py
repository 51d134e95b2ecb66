"""The CPU fast path's model half: fewer, fused graph nodes for norms and RoPE.

MLX's CPU backend has no native kernels for ``mx.fast.rms_norm`` and
``mx.fast.rope``: they run as their reference decompositions, about 13 and 32
graph nodes per call, and each node costs a few microseconds to dispatch. On a
135M model that is half of a decode step's 4,200 nodes. At load, on CPU only,
each ``nn.RMSNorm`` and plain ``nn.RoPE`` module is swapped for one computing
the same function with fewer nodes: a compiled (fused) RMSNorm, and RoPE from a
precomputed cos/sin table. The projections that read the same input (q/k/v,
gate/up) become views of one product with their weights stacked: fewer, larger
matrix-vector products, and bit-identical results. mlx-lm's model code is unchanged.

Only modules known exactly are swapped: ``nn.RMSNorm``, Gemma's ``1 + weight``
RMSNorm classes, plain ``nn.RoPE`` (any offset: an int, one per batch row, or
an array a model passes), bias-free q/k/v and gate/up projections. Anything
else (scaled RoPE variants, MoE blocks, biased layers) is left alone.

Prefill chunks' causal attention goes to a fused kernel (`cpu_attention`), and quantized
layers' products to native kernels (`cpu_quant`), stacked like float ones.

``MLX_NOTEBOOK_FAST=0`` turns this off (with the sgemv shim, see ``gemv.c``).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .build import fast_enabled


def _rms(eps: float, one_plus: bool):
    def norm(x: mx.array, w: mx.array) -> mx.array:
        scale = 1.0 + w if one_plus else w
        return x * mx.rsqrt(mx.mean(mx.square(x), axis=-1, keepdims=True) + eps) * scale

    return mx.compile(norm)


def _one_plus_norms() -> tuple[type, ...]:
    """Gemma families' ``1 + weight`` RMSNorm classes, among the modules already loaded."""
    import sys

    mods = (sys.modules.get(f"mlx_lm.models.{n}") for n in ("gemma", "gemma2", "gemma3_text"))
    return tuple(m.RMSNorm for m in mods if m is not None and hasattr(m, "RMSNorm"))


class FusedRMSNorm(nn.Module):
    """``nn.RMSNorm`` (or Gemma's, scaling by ``1 + weight``) as one compiled function.

    Args:
        weight: The stored weight.
        eps: Added to the mean square.
        one_plus: Scale by ``1 + weight``, as Gemma's RMSNorm does.
    """

    def __init__(self, weight: mx.array, eps: float, one_plus: bool = False) -> None:
        super().__init__()
        self.weight = weight
        self.eps = eps
        self.one_plus = one_plus
        self._fn = _rms(eps, one_plus)

    def __call__(self, x: mx.array) -> mx.array:
        """Normalize the last axis of ``x`` and scale it."""
        return self._fn(x, self.weight)


def _rotate_traditional(x, cos2, sin2):
    # Adjacent pairs (x0, x1) rotate together, as llama.cpp lays out Q and K:
    # (x0 c - x1 s, x1 c + x0 s) = x * [c, c] + swap(x) * [-s, s], one fused expression.
    shape = x.shape
    swapped = x.reshape(*shape[:-1], shape[-1] // 2, 2)[..., ::-1].reshape(shape)
    return x * cos2 + swapped * sin2


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
        self.pinned: tuple | None = None
        self._flat: dict[bool, tuple] = {}  # the pinned rows as [B, dims], by layout
        self._step: tuple = (None, {})  # (offset, {layout: its cos and sin rows})
        self.grow(2048)

    def pin(self, positions: list[int] | None) -> None:
        """Take the rows of one batched decode step once, for every layer to reuse.

        Args:
            positions: Each batch row's position in this step (the tokens its cache
                holds), or None to stop using pinned rows.
        """
        if positions is None:
            self.pinned, self._flat = None, {}
            return
        self.grow(max(positions) + 1)
        idx = mx.array(positions)
        rows = [t[idx][:, None, None] for t in (self.cos, self.sin, self.cos2, self.sin2)]
        self.pinned = (len(positions), *rows)  # each (B, 1, 1, D)
        flat = [r.reshape(len(positions), -1) for r in rows]
        self._flat = {False: (flat[0], flat[1]), True: (flat[2], flat[3])}

    def span(self, offset: int, n: int, traditional: bool) -> tuple[mx.array, mx.array]:
        """The cos and sin rows ``[n, width]`` of positions ``offset`` .. ``offset + n - 1``."""
        self.grow(offset + n)
        c, s = (self.cos2, self.sin2) if traditional else (self.cos, self.sin)
        return c[offset : offset + n], s[offset : offset + n]

    def step_rows(self, offset, rows: int, traditional: bool) -> tuple | None:
        """The cos and sin rows ``[1 or B, dims]`` of one decode step's positions, or None.

        Every layer of a step asks for the same rows, so they are taken once per step.

        Args:
            offset: The cache's offset: an int, or one per batch row (an array), which
                only pinned rows answer (reading it would stall the pipeline).
            rows: The step's batch rows.
            traditional: The interleaved layout (`TableRoPE.traditional`).
        """
        if isinstance(offset, int):
            at, memo = self._step
            if at != offset:
                at, memo = self._step = (offset, {})
            if traditional not in memo:
                memo[traditional] = self.span(offset, 1, traditional)
            return memo[traditional]
        if not isinstance(offset, mx.array) or not self.pinned or self.pinned[0] != rows:
            return None
        return self._flat[traditional]

    def angles(self, positions: mx.array, traditional: bool) -> tuple[mx.array, mx.array]:
        """The cos and sin rows of any integer ``positions`` (any shape), as the table has them."""
        inv = 1.0 / (self.base ** (mx.arange(0, self.dims, 2, dtype=mx.float32) / self.dims))
        theta = (positions.astype(mx.float32) * self.scale)[..., None] * inv
        cos, sin = mx.cos(theta), mx.sin(theta)
        if not traditional:
            return cos, sin
        # The interleaved layout's per-feature rows: [c0, c0, c1, c1, ...], [-s0, s0, ...].
        cos2 = mx.repeat(cos, 2, axis=-1)
        sin2 = mx.stack([-sin, sin], axis=-1).reshape(*sin.shape[:-1], self.dims)
        return cos2, sin2

    def grow(self, need: int) -> None:
        """Cover positions up to ``need`` (at least doubling)."""
        if need <= self.size:
            return
        size = max(need, 2 * self.size)
        pos = mx.arange(size, dtype=mx.float32)
        self.cos, self.sin = self.angles(pos, False)
        self.cos2, self.sin2 = self.angles(pos, True)
        mx.eval(self.cos, self.sin, self.cos2, self.sin2)
        self.size = size

    @property
    def nbytes(self) -> int:
        """Bytes of the tables."""
        return self.cos.nbytes + self.sin.nbytes + self.cos2.nbytes + self.sin2.nbytes


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

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        """Rotate ``x`` (B, H, L, D) for positions ``offset`` .. ``offset + L - 1``.

        ``offset`` is an int, or one per batch row (a batched KV cache's offsets).
        """
        n = x.shape[-2]
        t = self._table
        pinned = t.pinned
        if isinstance(offset, mx.array) and pinned and n == 1 and pinned[0] == x.shape[0]:
            cos, sin = (pinned[3], pinned[4]) if self.traditional else (pinned[1], pinned[2])
        elif isinstance(offset, mx.array):
            # Positions held in an array (one per batch row, or a model that passes its
            # offset as one): reading them would stall the pipeline once per layer, and
            # they may lie past the table, so their angles are computed here, with the
            # table's own arithmetic (the same values). Left-padded rows have negative
            # offsets; their padded positions are masked out.
            pos = offset.reshape(-1, 1) + mx.arange(n)  # (B, L)
            cos, sin = t.angles(pos, self.traditional)
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, D)
        else:
            cos, sin = t.span(offset, n, self.traditional)
        if cos.dtype != x.dtype:
            cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
        rotate = _ROTATE[self.traditional]
        if self.dims == x.shape[-1]:
            return rotate(x, cos, sin)
        head = rotate(x[..., : self.dims], cos, sin)
        return mx.concatenate([head, x[..., self.dims :]], axis=-1)


class StackedLinear(nn.Module):
    """The weights of several bias-free linear layers stacked, computed once per input.

    Args:
        linears: Layers that take the same input (same input width): all ``nn.Linear``,
            or all `FastQuantizedLinear` with one group size and bit width.
    """

    def __init__(self, linears: list) -> None:
        super().__init__()
        self.weight = mx.concatenate([lin.weight for lin in linears], axis=0)
        quant = None
        if isinstance(linears[0], nn.QuantizedLinear):  # packed rows stack as rows too
            from .quant import stacked_scales

            self.scales, biases = stacked_scales(linears)
            if biases is not None:
                self.biases = biases
            quant = (linears[0].group_size, linears[0].bits)
        mx.eval(self.parameters())
        bounds, start = [], 0
        for lin in linears:
            bounds.append((start, start + lin.weight.shape[0]))
            start += lin.weight.shape[0]
        object.__setattr__(self, "bounds", bounds)  # plain data, not parameters
        object.__setattr__(self, "quant", quant)
        object.__setattr__(self, "_last", (None, None))

    def product(self, x: mx.array) -> mx.array:
        """``x @ W.T`` for the stacked ``W``, reused while the same input comes again."""
        seen, y = self._last
        if x is not seen:  # the model calls q, k and v (or gate and up) on one array
            if self.quant is None:
                y = x @ self.weight.T
            else:
                from .quant import matmul

                y = matmul(x, self.weight, self.scales, self.get("biases"), *self.quant)
            object.__setattr__(self, "_last", (x, y))
        return y


class StackedView(nn.Module):
    """One original layer's rows of a `StackedLinear` (it owns no parameters)."""

    def __init__(self, stack: StackedLinear, index: int) -> None:
        super().__init__()
        object.__setattr__(self, "_stack", stack)
        object.__setattr__(self, "_span", stack.bounds[index])

    def __call__(self, x: mx.array) -> mx.array:
        """The original layer's outputs for ``x``."""
        a, b = self._span
        return self._stack.product(x)[..., a:b]


_STACKS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _stackable(layers: list) -> bool:
    from .quant import FastQuantizedLinear

    if any("bias" in lin for lin in layers if isinstance(lin, nn.Module)):
        return False
    if all(type(lin) is nn.Linear for lin in layers):
        return True
    kinds = {(lin.group_size, lin.bits) for lin in layers if type(lin) is FastQuantizedLinear}
    return len(kinds) == 1 and all(type(lin) is FastQuantizedLinear for lin in layers)


def _stack(module, counts: dict) -> None:
    for names in _STACKS:
        layers = [module.get(n) for n in names]
        if not _stackable(layers):
            continue
        if len({lin.weight.shape[1] for lin in layers}) != 1:
            continue
        stack = StackedLinear(layers)
        module["mlxnb_" + "_".join(n.split("_")[0] for n in names)] = stack  # a parameter
        for i, n in enumerate(names):
            setattr(module, n, StackedView(stack, i))
        key = "/".join(n.split("_")[0] for n in names) + " stacked"
        counts[key] = counts.get(key, 0) + 1


def _replacement(module, tables: dict):
    if isinstance(module, nn.RMSNorm):
        return FusedRMSNorm(module.weight, module.eps)
    if type(module) in tables["one_plus"]:  # exactly these classes: subclasses may differ
        return FusedRMSNorm(module.weight, module.eps, one_plus=True)
    if type(module) is nn.RoPE:  # subclasses (scaled variants) compute other things
        key = (module.dims, module.base, module.scale)
        if key not in tables:  # one table per RoPE configuration, shared by its layers
            tables[key] = RopeTable(*key)
        return TableRoPE(module.dims, module.traditional, *key[1:], table=tables[key])
    return None


def _swap(module, counts: dict, tables: dict) -> None:
    _stack(module, counts)
    for name, child in module.children().items():
        items = enumerate(child) if isinstance(child, list) else [(None, child)]
        for i, sub in items:
            if not isinstance(sub, nn.Module) or isinstance(sub, (StackedLinear, StackedView)):
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
        What was swapped, e.g. ``["61 RMSNorm", "30 RoPE", "fused prefill attention"]``
        (empty when nothing was).
    """
    if device != "cpu" or not fast_enabled():
        return []
    from .attention import install

    counts: dict[str, int] = {}
    done = []
    if hasattr(model, "named_modules"):  # quantized layers first: they may stack then
        from .quant import install as install_quant

        swapped, why = install_quant(model)
        if swapped:
            done.append(f"{swapped} quantized products native")
        elif why is not None:
            done.append(f"quantized products on MLX's kernels: {why}")
    _swap(model, counts, {"one_plus": _one_plus_norms()})
    done += [f"{n} {name}" for name, n in sorted(counts.items())]
    if hasattr(model, "named_modules") and install(model):
        done.append("fused prefill attention")
    return done


def rope_tables(model) -> list[RopeTable]:
    """The RoPE tables the fast path gave ``model`` (to grow before batched steps)."""
    if not hasattr(model, "named_modules"):  # not an nn.Module (a scripted test model)
        return []
    tables = {id(m._table): m._table for _, m in model.named_modules() if isinstance(m, TableRoPE)}
    return list(tables.values())


def buffer_bytes(model) -> int:
    """Bytes the fast path added to ``model`` beside its parameters.

    The RoPE tables, and the huge-page buffer's alignment (`cpu_pages`).
    """
    return sum(t.nbytes for t in rope_tables(model)) + getattr(model, "_mlxnb_page_slack", 0)
