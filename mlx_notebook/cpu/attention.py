"""The CPU fast path's attention: prefill chunks, verify passes and batched decode steps.

MLX's CPU ``scaled_dot_product_attention`` masks a chunk's whole score matrix
and takes its softmax in several single-threaded passes: most of the
attention's time, which is over half of a prefill chunk's on the default
model. On CPU, `install` routes the attention of a loaded model's modules
through ``mlxnb_causal_attention``: one sgemm per key/value head for the
scores, one threaded pass per row over only the keys it sees, one sgemm for
the values. It takes only what it computes as mlx-lm does: one row (no batch
padding), a plain causal mask, no attention sinks, no quantized KV cache,
float32, and at least `MIN_ROWS` queries: prefill chunks and speculative verify
passes. A decode step (one query per row, a boolean padding mask per row) goes to
``mlxnb_decode_attention`` instead, which reads the (batched) KV cache's buffer in
place: as an MLX primitive of the fast path's extension (`_ext`), so the step stays
in MLX's lazy graph and pipelined, one row or many. Without the extension only
batched steps take the kernel, through numpy (`batched_step`): that evaluates the
graph up to the layer, which costs a one-row step more than it saves. Everything
else (a chunk's mask array, sinks) goes to mlx-lm's own function unchanged.
``MLX_NOTEBOOK_FUSED_ATTENTION=0`` leaves it out (the rest of the fast path stays).
"""

from __future__ import annotations

import ctypes
import sys

import mlx.core as mx
import numpy as np

from .. import config
from . import ext as _ext

MIN_ROWS = 2  # one query is a decode step: the step kernel's
# Chunks of up to this many queries (verify passes) go to the extension's primitive, whose
# kernel (attn.c's FEW_QUERIES path) runs on OpenMP threads alone. Longer chunks (prefill)
# take OpenBLAS's sgemm: run by the primitive on MLX's stream thread, a 1,500-token prefill
# was 3-4x slower with 2 threads (and not with 1), likely OpenBLAS's threads waiting for a
# core held by a spinning OpenMP thread; through numpy, on the engine's thread, it is not.
FEW_QUERIES = 32
ENV = "MLX_NOTEBOOK_FUSED_ATTENTION"

_P = ctypes.POINTER(ctypes.c_float)


_ARGS = {
    "mlxnb_causal_attention": [_P, _P, _P, _P]
    + [ctypes.c_int] * 5
    + [ctypes.c_float]
    + [ctypes.c_long] * 2,
    "mlxnb_decode_attention": [_P, _P, _P, ctypes.c_void_p, _P]
    + [ctypes.c_int] * 5
    + [ctypes.c_long] * 6
    + [ctypes.c_float, ctypes.c_int],
}


def _kernel(name: str = "mlxnb_causal_attention"):
    from . import blas as _blas

    lib = _blas.native_library()
    fn = getattr(lib, name, None) if lib is not None else None
    if fn is not None and fn.argtypes is None:
        fn.argtypes = _ARGS[name]
        fn.restype = ctypes.c_int
    return fn


def _native(queries: mx.array, keys: mx.array, sinks, cache) -> bool:
    # What both kernels need: CPU (a GPU has its own fused kernel), float32, no
    # attention sinks, no quantized KV cache, whole groups of query heads per KV head.
    return (
        mx.default_device() == mx.cpu
        and sinks is None
        and not hasattr(cache, "bits")
        and queries.ndim == 4
        and queries.dtype == keys.dtype == mx.float32
        and queries.shape[1] % keys.shape[1] == 0
    )


def applies(queries: mx.array, keys: mx.array, mask, sinks, cache) -> bool:
    """Whether the fused kernel computes this call exactly as mlx-lm's would."""
    return (
        _native(queries, keys, sinks, cache)
        and isinstance(mask, str)
        and mask == "causal"
        and queries.shape[0] == 1
        and keys.shape[0] == 1
        and MIN_ROWS <= queries.shape[2] <= keys.shape[2]
    )


def applies_to_step(queries: mx.array, keys: mx.array, mask, sinks, cache) -> bool:
    """Whether the decode-step kernel computes this call exactly as mlx-lm's would.

    A decode step: one query per row, every key visible or a boolean mask per row
    (a batched KV cache's left padding), float32.
    """
    rows = queries.shape[0] if queries.ndim == 4 else 0
    return (
        _native(queries, keys, sinks, cache)
        and rows >= 1
        and queries.shape[2] == 1
        and keys.shape[0] == rows
        and (mask is None or step_mask(mask, rows, keys.shape[2]))
    )


def step_mask(mask, rows: int, size: int) -> bool:
    """Whether ``mask`` is a decode step's boolean mask ``[rows or 1, 1, 1, size]``."""
    return (
        isinstance(mask, mx.array)
        and mask.dtype == mx.bool_
        and mask.ndim == 4
        and mask.shape[0] in (1, rows)
        and mask.shape[1] == mask.shape[2] == 1
        and mask.shape[-1] == size
    )


def _floats(a: np.ndarray) -> list[int]:
    return [st // 4 for st in a.strides[:3]]


def batched_step(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask):
    """``softmax(scale * q k^T, mask) v`` for one query per batch row, on the native kernel.

    The keys and values are read in place (a KV cache's buffer, sliced), not copied.

    Args:
        queries: ``[B, H, 1, D]``.
        keys: ``[B, Hkv, S, D]``.
        values: ``[B, Hkv, S, D]``.
        scale: The scores' scale.
        mask: None (every key), or booleans ``[B or 1, 1, 1, S]``.

    Returns:
        ``[B, H, 1, D]``, or None when the kernel is not loaded or refuses the call.
    """
    fn = _kernel("mlxnb_decode_attention")
    if fn is None:
        return None
    mx.eval(queries, keys, values, mask)
    rows, heads, _, dim = queries.shape
    kv_heads, size = keys.shape[1], keys.shape[2]
    q = np.ascontiguousarray(np.asarray(queries).reshape(rows, heads, dim))
    k, v = np.asarray(keys), np.asarray(values)
    if k.strides[3] != 4 or v.strides[3] != 4:  # the head dimension must be contiguous
        k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)
    m = None
    if mask is not None:
        m = np.ascontiguousarray(np.broadcast_to(np.asarray(mask), (rows, 1, 1, size)))
        m = m.reshape(rows, size).view(np.uint8)
    out = np.empty((rows, heads, dim), np.float32)
    ptr = lambda a: a.ctypes.data_as(_P)  # noqa: E731
    mptr = None if m is None else m.ctypes.data
    got = fn(ptr(q), ptr(k), ptr(v), mptr, ptr(out), rows, heads, kv_heads, size, dim,
             *_floats(k), *_floats(v), scale, 0)  # fmt: skip
    return None if got != 0 else mx.array(out)[:, :, None]


def causal_attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float):
    """``softmax(scale * q k^T, causal) v`` for one row, on the native kernel.

    Args:
        queries: ``[1, H, L, D]``; query ``i`` sits at position ``S - L + i``.
        keys: ``[1, Hkv, S, D]``.
        values: ``[1, Hkv, S, D]``.
        scale: The scores' scale.

    Returns:
        ``[1, H, L, D]``, or None when the kernel is not loaded or refuses the shape.
    """
    fn = _kernel()
    if fn is None:
        return None
    mx.eval(queries, keys, values)
    _, heads, rows, dim = queries.shape
    kv_heads, size = keys.shape[1], keys.shape[2]
    q = np.ascontiguousarray(np.asarray(queries)[0])
    k = np.ascontiguousarray(np.asarray(keys)[0])
    v = np.ascontiguousarray(np.asarray(values)[0])
    out = np.empty((heads, rows, dim), np.float32)
    ptr = lambda a: a.ctypes.data_as(_P)  # noqa: E731
    heads_apart = size * dim  # k and v are dense here
    if fn(ptr(q), ptr(k), ptr(v), ptr(out), heads, kv_heads, rows, size, dim, scale,
          heads_apart, heads_apart) != 0:  # fmt: skip
        return None
    return mx.array(out)[None]


def _fused(original):
    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        out = None
        if applies(queries, keys, mask, sinks, cache):
            ext = _ext.attention()
            if ext is not None and queries.shape[2] <= FEW_QUERIES:
                # in the graph: a verify pass stays pipelined
                out = ext.causal_attention(queries, keys, values, scale)
            else:
                out = causal_attention(queries, keys, values, scale)
        elif applies_to_step(queries, keys, mask, sinks, cache):
            ext = _ext.attention()
            if ext is not None:  # in the graph: the step stays pipelined
                out = ext.decode_attention(queries, keys, values, mask, scale)
            elif queries.shape[0] > 1:  # through numpy: worth it for batched rows only
                out = batched_step(queries, keys, values, scale, mask)
        if out is not None:
            return out
        return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)

    scaled_dot_product_attention.mlxnb_original = original
    return scaled_dot_product_attention


def install(model) -> int:
    """Route the attention of ``model``'s mlx-lm modules through the kernel (CPU only).

    The function is swapped in each model module that imported mlx-lm's
    ``scaled_dot_product_attention``, once per module (calls it cannot take go to
    the original). Returns how many of the model's modules go through it now.
    """
    if not config.enabled(ENV) or _kernel() is None:
        return 0
    _ext.load()  # decode steps' attention as an MLX primitive (built once per machine)
    fused = 0
    names = {type(m).__module__ for _, m in model.named_modules()}
    for mod in filter(None, (sys.modules.get(n) for n in names)):
        f = getattr(mod, "scaled_dot_product_attention", None)
        if f is None:
            continue
        if not hasattr(f, "mlxnb_original"):
            mod.scaled_dot_product_attention = _fused(f)
        fused += 1
    return fused


def calls() -> int:
    """Chunks the kernel has computed in this process (0 when it is not loaded)."""
    from . import blas as _blas

    lib = _blas.native_library()
    fn = getattr(lib, "mlxnb_attention_calls", None) if lib is not None else None
    if fn is None:
        return 0
    fn.restype = ctypes.c_long
    return int(fn())


__all__ = [
    "FEW_QUERIES",
    "MIN_ROWS",
    "applies",
    "applies_to_step",
    "batched_step",
    "calls",
    "causal_attention",
    "install",
    "step_mask",
]
