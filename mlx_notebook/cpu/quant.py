"""The CPU fast path for quantized models: their products on native kernels.

MLX's CPU backend runs ``quantized_matmul`` as a scalar loop on one thread, so
a 4-bit model decodes slower there than its float32 original. On CPU, each
``nn.QuantizedLinear`` and ``nn.QuantizedEmbedding`` (a tied LM head) in MLX's
affine 4-, 5-, 6- or 8-bit layout becomes a subclass whose product is the extension's
primitive (`_ext`, kernels in ``qmm.c``), computed from the packed weights.
Weights, their layout and the computed function stay as they are: activations
stay float32, so results equal MLX's own kernel up to the order of additions.

Scales and biases stay float16 where that holds them exactly: a GGUF file's block
scales are float16, and in float32 a 4-bit model grew by a fifth (0.5 of 4.5 bits a
weight, 856 against 720 MB at the 1B size), all of it read at every decode step. The
kernels widen them a few weight rows at a time. Where every bias is its scale times
-2^(bits - 1) (GGUF's symmetric Q4_0 and Q8_0 blocks), the biases are dropped and the
kernels make them: a Q4_0 file's 4.5 bits a weight, as in the file. Every other
floating parameter, and the scales of layers left on MLX's kernels, are float32
(`settle`): MLX's own products follow the scales' dtype into float16, slow on x86.

Anything else (2, 3 or 7 bits, the ``mxfp4`` modes, group sizes that are not
a multiple of 32) keeps MLX's kernel. Without the extension (no compiler,
another nanobind ABI) nothing is swapped and `%mlx status` says why.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
import mlx.nn as nn

from . import ext as _ext

_pass = threading.local()  # the graph being built is a prefill pass's (worker thread)


@contextmanager
def prefill_pass() -> Iterator[None]:
    """Within it, the products the graph gets are a prefill pass's (8-bit inputs where on).

    Decode steps and verify passes keep 16-bit inputs, so a verify pass gives each
    draft what a decode step would (speculation stays exact); a prefill's rows round
    one by one, so a product's row does not depend on the rows beside it (the other
    operations' float sums still follow the chunking: why it is off by default).
    """
    before = inputs8()
    _pass.on = _ext.prefill_inputs8()
    try:
        yield
    finally:
        _pass.on = before


def inputs8() -> bool:
    """Whether the products built now are a prefill pass's on 8-bit inputs."""
    return getattr(_pass, "on", False)


def matmul(x: mx.array, w: mx.array, scales: mx.array, biases, gs: int, bits: int):
    """``x @ dequantize(w).T`` on the extension's kernels (x float32, any leading shape).

    ``biases`` None: symmetric blocks, each bias the scale times ``-2 ** (bits - 1)``.
    Inside `prefill_pass`, on 8-bit inputs where they are on.
    """
    return _ext.load().quant_matmul(x, w, scales, biases, gs, bits, inputs8())


def symmetric_biases(scales: mx.array, bits: int) -> mx.array:
    """The biases of symmetric blocks (GGUF's Q4_0, Q8_0): each the scale times -2^(bits-1)."""
    return scales * -(2 ** (bits - 1))


def supported(layer) -> bool:
    """Whether ``layer``'s packed weights are in a layout the kernels read."""
    biases = getattr(layer, "biases", None)
    return (
        getattr(layer, "mode", "affine") == "affine"
        and getattr(layer, "bits", None) in (4, 5, 6, 8)
        and getattr(layer, "group_size", 1) % 32 == 0
        and layer.weight.dtype == mx.uint32
        and mx.issubdtype(layer.scales.dtype, mx.floating)
        and biases is not None
        and biases.dtype == layer.scales.dtype
    )


def keeps_scales(module, key: str) -> bool:
    """Whether ``module[key]`` is a quantized layer's scales or biases (left as loaded).

    The loader casts every other floating parameter to float32 on the CPU; these wait
    for `install` (float16 where exact) and `settle` (float32 elsewhere).
    """
    return key in ("scales", "biases") and type(module) in _FAST


def _narrow(layer) -> None:
    """Store ``layer``'s scales and biases as float16 where that holds them exactly."""
    for key in ("scales", "biases"):
        a = layer[key]
        if a.dtype == mx.float16:
            continue
        half = a.astype(mx.float16)
        exact = mx.array_equal(half.astype(a.dtype), a).item()
        layer[key] = half if exact else a.astype(mx.float32)
    if layer["scales"].dtype != layer["biases"].dtype:  # one exact, the other not
        layer["scales"] = layer["scales"].astype(mx.float32)
        layer["biases"] = layer["biases"].astype(mx.float32)
    s, b = layer["scales"].astype(mx.float32), layer["biases"].astype(mx.float32)
    if mx.array_equal(b, symmetric_biases(s, layer.bits)).item():  # made in the kernels
        del layer["biases"]


def settle(model) -> int:
    """Give the quantized layers left on MLX's kernels float32 scales and biases.

    Returns:
        How many layers changed.
    """
    changed = 0
    if not hasattr(model, "named_modules"):
        return 0
    for _, m in model.named_modules():
        if type(m) in _FAST and any(
            k in m and m[k].dtype != mx.float32 and mx.issubdtype(m[k].dtype, mx.floating)
            for k in ("scales", "biases")
        ):
            for k in ("scales", "biases"):
                if k in m:
                    m[k] = m[k].astype(mx.float32)
            changed += 1
    return changed


def stacked_scales(linears: list) -> tuple[mx.array, mx.array | None]:
    """The layers' scales and biases stacked as rows, in one dtype.

    Each layer's are float16 or float32, with biases or symmetric (`_narrow`
    decides per layer): mixed, the stack takes float32 and makes the missing biases.
    """
    parts = [(lin.scales, lin.get("biases")) for lin in linears]
    dtypes = {a.dtype for s, b in parts for a in (s, b) if a is not None}
    dtype = dtypes.pop() if len(dtypes) == 1 else mx.float32
    if all(b is None for _, b in parts):
        return mx.concatenate([s.astype(dtype) for s, _ in parts], axis=0), None
    bits = linears[0].bits
    made = [symmetric_biases(s, bits) if b is None else b for s, b in parts]
    return (
        mx.concatenate([s.astype(dtype) for s, _ in parts], axis=0),
        mx.concatenate([b.astype(dtype) for b in made], axis=0),
    )


def _product(layer, x: mx.array) -> mx.array:
    w, s, b = layer["weight"], layer["scales"], layer.get("biases")
    return matmul(x, w, s, b, layer.group_size, layer.bits)


class FastQuantizedLinear(nn.QuantizedLinear):
    """``nn.QuantizedLinear`` computed by the native kernels (same parameters)."""

    def __call__(self, x: mx.array) -> mx.array:
        """``x @ W.T (+ bias)``."""
        y = _product(self, x)
        return y + self["bias"] if "bias" in self else y


class FastQuantizedEmbedding(nn.QuantizedEmbedding):
    """``nn.QuantizedEmbedding`` whose use as the LM head runs on the native kernels."""

    def __call__(self, x: mx.array) -> mx.array:
        """The embeddings of ``x``, dequantized in float32 (as with float32 scales)."""
        scales = self["scales"][x].astype(mx.float32)
        b = self.get("biases")
        return mx.dequantize(
            self["weight"][x],
            scales=scales,
            biases=symmetric_biases(scales, self.bits) if b is None else b[x].astype(mx.float32),
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
        )

    def as_linear(self, x: mx.array) -> mx.array:
        """``x @ E.T``: the scores of every token (a tied LM head)."""
        return _product(self, x)


_FAST = {nn.QuantizedLinear: FastQuantizedLinear, nn.QuantizedEmbedding: FastQuantizedEmbedding}


def install(model) -> tuple[int, str | None]:
    """Swap the class of every supported quantized layer of ``model`` (CPU only).

    Builds the extension on first use (about 15 s, once per machine).

    Returns:
        How many layers were swapped, and why none were when the model has such
        layers but the extension is unavailable (else None).
    """
    layers = [
        m for _, m in model.named_modules() if type(m) in _FAST and supported(m)
    ]  # exactly these classes: a subclass may compute something else
    if not layers:
        return 0, None
    if _ext.load() is None:
        return 0, _ext.status()
    for m in layers:
        m.__class__ = _FAST[type(m)]  # same parameters and layout, another product
        _narrow(m)
    return len(layers), None
