"""The CPU fast path for quantized models: their products on native kernels.

MLX's CPU backend runs ``quantized_matmul`` as a scalar loop on one thread, so
a 4-bit model decodes slower there than its float32 original. On CPU, each
``nn.QuantizedLinear`` and ``nn.QuantizedEmbedding`` (a tied LM head) in MLX's
affine 4- or 8-bit layout becomes a subclass whose product is the extension's
primitive (`_ext`, kernels in ``qmm.c``), computed from the packed weights.
Weights, their layout and the computed function stay as they are: activations
stay float32, so results equal MLX's own kernel up to the order of additions.

Anything else (other bit widths, the ``mxfp4`` modes, group sizes that are not
a multiple of 32) keeps MLX's kernel. Without the extension (no compiler,
another nanobind ABI) nothing is swapped and `%mlx status` says why.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from . import ext as _ext


def matmul(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array, gs: int, bits: int):
    """``x @ dequantize(w).T`` on the extension's kernels (x float32, any leading shape)."""
    return _ext.load().quant_matmul(x, w, scales, biases, gs, bits)


def supported(layer) -> bool:
    """Whether ``layer``'s packed weights are in a layout the kernels read."""
    return (
        getattr(layer, "mode", "affine") == "affine"
        and getattr(layer, "bits", None) in (4, 8)
        and getattr(layer, "group_size", 1) % 32 == 0
        and layer.weight.dtype == mx.uint32
        and layer.scales.dtype == mx.float32
        and getattr(layer, "biases", None) is not None
        and layer.biases.dtype == mx.float32
    )


class FastQuantizedLinear(nn.QuantizedLinear):
    """``nn.QuantizedLinear`` computed by the native kernels (same parameters)."""

    def __call__(self, x: mx.array) -> mx.array:
        """``x @ W.T (+ bias)``."""
        y = matmul(x, self["weight"], self["scales"], self["biases"], self.group_size, self.bits)
        return y + self["bias"] if "bias" in self else y


class FastQuantizedEmbedding(nn.QuantizedEmbedding):
    """``nn.QuantizedEmbedding`` whose use as the LM head runs on the native kernels."""

    def as_linear(self, x: mx.array) -> mx.array:
        """``x @ E.T``: the scores of every token (a tied LM head)."""
        return matmul(x, self["weight"], self["scales"], self["biases"], self.group_size, self.bits)


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
    return len(layers), None
