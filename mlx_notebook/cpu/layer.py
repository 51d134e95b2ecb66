"""The CPU fast path's llama-style layers: two native calls per layer, plus the attention.

After the fast path's other swaps, one decode step of a 135M llama is still about
50 MLX graph nodes per layer (norms, the stacked products and their slices,
reshapes, transposes, RoPE, the attention, residual adds, SwiGLU), and MLX's CPU
backend spends a few microseconds scheduling each: about as long as the
products themselves. In a prefill chunk, MLX's single-threaded elementwise work
(SwiGLU's sigmoid above all) cost as much as the products. On CPU, each layer whose
parts are exactly mlx-lm's llama modules, as the fast path left them, gets a subclass
whose pass over a KV cache (a decode step of one token per row, or one row's chunk
of tokens: prefill, a verify pass) is:

- ``layer_in``: RMSNorm, the stacked q/k/v product and RoPE, one primitive (three
  products where q, k and v differ in precision and do not stack: a K-quant file's
  6-bit v beside 4- or 5-bit q and k);
- the cache's own ``update_and_fetch`` and the fast path's attention, unchanged;
- ``layer_out``: the output product and residual, RMSNorm, the stacked gate/up
  product, SwiGLU, the down product and residual, one primitive.

A decode step over mlx-lm's plain KV cache (one row, the usual case) or its batched
cache (rows of ``map`` and concurrent jobs, left-padded) takes four nodes instead of
seven: ``layer_in``, the cache's write of the new keys and values (``kv_write``, in
place, as mlx-lm's slice assignments write them), and ``attend_out``, which reads the
cache's buffers in place (no slices; a batch's rows through the step's mask) and then
computes ``layer_out``. Measured paired in one process on the default model (8
alternating rounds): +4% one-row decode, median, rounds 1.00-1.09x.

Both are primitives of the fast path's extension (`_ext`, kernels in ``layer.c``):
in MLX's lazy graph, so the step stays pipelined. A chunk's tokens go through them as
rows. They compute mlx-lm's functions in float32 in the same order, with sums added
in another order and e^x from a polynomial (about 1 ulp). Several rows of several
tokens, quantized KV caches and anything else take the layer's own ``__call__``.
``MLX_NOTEBOOK_FUSED_LAYERS=0`` leaves layers alone.
"""

from __future__ import annotations

import functools
import sys

import mlx.core as mx
import mlx.nn as nn

from .. import config
from . import ext as _ext
from .attention import ENV as ATTENTION_ENV
from .attention import step_mask
from .fast import FusedRMSNorm, StackedLinear, StackedView, TableRoPE
from .quant import FastQuantizedLinear, inputs8

ENV = "MLX_NOTEBOOK_FUSED_LAYERS"


def _arrays(layer) -> list[mx.array] | None:
    """A bias-free linear layer's arrays as the primitives take them, or None."""
    if isinstance(layer, StackedLinear):
        return [layer[k] for k in _QUANT if k in layer]  # no biases: symmetric blocks
    if "bias" in layer:
        return None
    if type(layer) is nn.Linear:
        return [layer.weight]
    if type(layer) is FastQuantizedLinear:
        return [layer[k] for k in _QUANT if k in layer]
    return None


def _stack_of(*views) -> StackedLinear | None:
    """The one stack ``views`` are, in order, all of; else None."""
    if not all(isinstance(v, StackedView) for v in views):
        return None
    stack = views[0]._stack
    ok = all(v._stack is stack and v._span == stack.bounds[i] for i, v in enumerate(views))
    return stack if ok and len(stack.bounds) == len(views) else None


def _qkv(attn) -> tuple | None:
    """q/k/v as the primitive takes them, or None.

    ``(stack,)``, or ``(q, k, v)`` where they are apart (each with its own arrays: a
    Q4_K_M file's symmetric 6-bit v has no biases beside q and k's).
    """
    stack = _stack_of(attn.q_proj, attn.k_proj, attn.v_proj)
    if stack is not None:
        return (stack,)
    parts = (attn.q_proj, attn.k_proj, attn.v_proj)
    arrays = [_arrays(m) for m in parts]
    if any(a is None for a in arrays):
        return None
    return parts


def _norm(m) -> bool:
    return isinstance(m, FusedRMSNorm) and not m.one_plus


def eligible(block) -> bool:
    """Whether ``block`` is mlx-lm's llama layer exactly, with parts the kernels compute."""
    llama = sys.modules.get("mlx_lm.models.llama")
    if llama is None or type(block) is not llama.TransformerBlock:
        return False
    attn, mlp = block.self_attn, block.mlp
    if type(attn) is not llama.Attention or type(mlp) is not llama.MLP:
        return False
    qkv = _qkv(attn)
    gate_up = _stack_of(mlp.gate_proj, mlp.up_proj)
    rope = attn.rope
    return (
        _norm(block.input_layernorm)
        and _norm(block.post_attention_layernorm)
        and qkv is not None
        and gate_up is not None
        and all(_arrays(m) is not None for m in (*qkv, gate_up, attn.o_proj, mlp.down_proj))
        and isinstance(rope, TableRoPE)
        and rope.dims == attn.head_dim
        and _q_rows(qkv) == attn.n_heads * attn.head_dim
    )


def _q_rows(qkv: tuple) -> int:
    """The query's output rows: the stack's first span, or q's own weight."""
    return qkv[0].bounds[0][1] if len(qkv) == 1 else qkv[0]["weight"].shape[0]


class _Plan:
    """A fused layer's parts, found once (its modules: parameters are read at each step)."""

    def __init__(self, block) -> None:
        attn, mlp = block.self_attn, block.mlp
        self.norm1, self.norm2 = block.input_layernorm, block.post_attention_layernorm
        self.eps1, self.eps2 = self.norm1.eps, self.norm2.eps
        # q/k/v: one stacked product, or three (`_qkv`); then o, gate/up, down
        self.qkv = _qkv(attn)
        self.linears = (self.qkv, (attn.o_proj,), (mlp.gate_proj._stack,), (mlp.down_proj,))
        # which arrays each product takes: the weight, or the weight, scales and biases
        self.keys = tuple(
            tuple(tuple(k for k in _QUANT if k in m) for m in ms) for ms in self.linears
        )
        self.counts = [len(k) for k in self.keys[0]]  # q/k/v's arrays, part by part
        self.scale, self.table, self.traditional = (
            attn.scale,
            attn.rope._table,
            attn.rope.traditional,
        )
        self.ext = _ext.load()  # not None: `install` checked
        self.heads = (attn.n_heads, attn.n_kv_heads)
        self.attention_module = sys.modules[type(attn).__module__]
        # Decode steps as one primitive after the cache's write, where the fused attention
        # is on: one row over mlx-lm's plain KV cache, several over its batched one.
        from mlx_lm.models.cache import BatchKVCache, KVCache

        self.kv_cache, self.batch_cache = KVCache, BatchKVCache
        self.step = config.enabled(ATTENTION_ENV)

    def arrays(self, i: int) -> list[mx.array]:
        """Product ``i``'s arrays, q/k/v's in turn where they are three."""
        # Module is a dict: plain lookups
        return [m[k] for m, keys in zip(self.linears[i], self.keys[i]) for k in keys]


_QUANT = ("weight", "scales", "biases")


@functools.cache
def _plain_cache(kind: type) -> bool:
    """Whether a cache class keeps float keys and values (a quantized KV cache has ``bits``)."""
    return hasattr(kind, "update_and_fetch") and not hasattr(kind, "bits")


def _step(block, x: mx.array, mask, cache):
    """The layer through the two primitives, or None where they do not apply.

    A decode step (one token per row) or a chunk of one row's tokens (prefill, a verify
    pass), whose tokens go through the primitives as rows.
    """
    if x.ndim != 3 or x.dtype != mx.float32 or cache is None or not _plain_cache(type(cache)):
        return None
    B, L, E = x.shape
    p, pre8 = block._mlxnb_plan, inputs8()
    if L == 1:
        rows = p.table.step_rows(cache.offset, B, p.traditional)
        # a prefill chunk of one token too takes layer_in/layer_out, on 8-bit inputs
        if rows is not None and not pre8 and _fits_step(p, cache, B, mask):
            return _decode_step(p, x, rows, cache, mask)
    elif B == 1 and isinstance(cache.offset, int):
        rows = p.table.span(cache.offset, L, p.traditional)
        x = x.reshape(L, 1, E)
    else:
        return None
    if rows is None:
        return None
    ext = p.ext
    q, k, v = ext.layer_in(
        x, p.norm1["weight"], p.eps1, p.arrays(0), *rows, p.traditional, *p.heads, len(p.qkv),
        pre8, p.counts,
    )  # fmt: skip
    if L > 1:  # rows back to one sequence: [1, heads, L, D], as mlx-lm's attention has it
        q, k, v = (t.reshape(1, L, t.shape[1], -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    k, v = cache.update_and_fetch(k, v)
    sdpa = p.attention_module.scaled_dot_product_attention  # the fast path's, if swapped in
    a = sdpa(q, k, v, cache=cache, scale=p.scale, mask=mask)
    if L > 1:
        a = a.transpose(0, 2, 1, 3).reshape(L, -1, 1, a.shape[-1])
    out = ext.layer_out(
        a, x, p.arrays(1), p.norm2["weight"], p.eps2, p.arrays(2), p.arrays(3), pre8
    )
    return out.reshape(1, L, E) if L > 1 else out


def _fits_step(p, cache, rows: int, mask) -> bool:
    """Whether a decode step of ``rows`` rows takes `_decode_step`.

    One row over mlx-lm's plain KV cache with no mask, or several over its batched
    cache (left-padded rows) with its boolean mask of the step, float32 keys, room in
    the buffer for this step's key (else the cache's own update grows it).
    """
    if not p.step or _ext.attention() is None:  # its kernels set (the extension loaded whole)
        return False
    keys = cache.keys
    if keys is None or keys.dtype != mx.float32:
        return False
    if rows == 1 and type(cache) is p.kv_cache:
        n = cache.offset
        return mask is None and isinstance(n, int) and n < keys.shape[2]
    if rows > 1 and type(cache) is p.batch_cache:
        n = cache._idx
        return (mask is None or step_mask(mask, rows, n + 1)) and n < keys.shape[2]
    return False  # another cache, or a plain one holding several rows


def _decode_step(p, x, rows, cache, mask):
    """A decode step in four graph nodes: layer_in, the cache's two writes, attend_out.

    The cache's write (``kv_write``) is what mlx-lm's ``update_and_fetch`` does when
    the buffer has room, its slice assignments, in place; ``attend_out`` then reads the
    cache's buffers in place (MLX's path slices them first, then attends) and computes
    ``layer_out``. A batched cache's rows see their keys through the step's mask (their
    left padding), as the attention would.
    """
    ext = p.ext
    q, k, v = ext.layer_in(
        x,
        p.norm1["weight"],
        p.eps1,
        p.arrays(0),
        *rows,
        p.traditional,
        *p.heads,
        len(p.qkv),
        counts=p.counts,
    )
    batched = type(cache) is p.batch_cache
    n = cache._idx if batched else cache.offset
    cache.keys = ext.kv_write(cache.keys, k, n)
    cache.values = ext.kv_write(cache.values, v, n)
    if batched:
        cache._idx = n + 1
        cache.offset = cache.offset + 1
    else:
        cache.offset = n + 1
    return ext.attend_out(
        q, cache.keys, cache.values, n + 1, p.scale, x, p.arrays(1), p.norm2["weight"],
        p.eps2, p.arrays(2), p.arrays(3), mask,
    )  # fmt: skip


_CLASSES: dict[type, type] = {}


def _fused_class(base: type) -> type:
    """``base`` with a decode step through the primitives (one subclass per base)."""
    if base not in _CLASSES:

        def __call__(self, x, mask=None, cache=None):
            out = _step(self, x, mask, cache)
            return base.__call__(self, x, mask, cache) if out is None else out

        _CLASSES[base] = type(f"DecodeFused{base.__name__}", (base,), {"__call__": __call__})
    return _CLASSES[base]


def install(model) -> int:
    """Give every eligible layer of ``model`` the fused decode step (CPU only).

    Returns:
        How many layers have it (0 without the extension or with the variable off).
    """
    if not config.enabled(ENV) or not hasattr(model, "named_modules"):
        return 0
    blocks = [m for _, m in model.named_modules() if eligible(m)]
    if not blocks or _ext.load() is None:
        return 0
    for b in blocks:
        object.__setattr__(b, "_mlxnb_plan", _Plan(b))  # plain data, not parameters
        b.__class__ = _fused_class(type(b))
    return len(blocks)


def calls() -> int:
    """Fused layer halves computed in this process."""
    mod = _ext.load()
    return 0 if mod is None else int(mod.layer_calls())


__all__ = ["ENV", "calls", "eligible", "install"]
