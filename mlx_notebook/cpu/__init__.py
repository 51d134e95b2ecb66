"""The optional CPU fast path (Linux): OpenBLAS ahead of MLX, native kernels, patched layers.

Nothing here is imported on Metal or CUDA, but `blas` at import on Linux (it must
load OpenBLAS before MLX). The native code in ``csrc/`` is built by ``python -m
mlx_notebook.cpu build`` (run by ``scripts/setup.sh``) or at the first CPU model
load, never at import. ``MLX_NOTEBOOK_FAST=0`` turns it all off.
"""

from __future__ import annotations


def install(model) -> list[str]:
    """Patch a CPU model for the fast path (worker thread; may build the native code).

    Fused norms and RoPE, quantized products and attention on native kernels
    (`fast`), llama-style layers as two native calls (`layer`), weights on huge
    pages (`pages`): each only where it computes exactly what mlx-lm does.

    Returns:
        What changed, e.g. ``["61 RMSNorm", "30 layers fused"]`` (empty: nothing).
    """
    from . import fast, layer, pages, quant

    changes = fast.apply(model, "cpu")
    fused = layer.install(model) if changes else 0  # on the fast path's modules only
    if fused:
        changes.append(f"{fused} layers fused")
    quant.settle(model)  # MLX's kernels (fast path off, other layouts): float32 scales
    paged = pages.install(model) if changes else None  # the final parameters
    if paged:
        changes.append(paged)
    return changes


def status_lines() -> list[str]:
    """Lines for ``%mlx status``: OpenBLAS, the library, the extension and the threads."""
    from . import blas, ext, threads

    s = blas.status()
    notes = [
        f"BLAS acceleration: {'OpenBLAS active' if s['active'] else 'off'} ({s['reason']})",
        f"CPU fast path: {'on' if s['gemv'] else 'off'} ({s['gemv_reason']})",
        threads.describe(),
    ]
    if ext.status() != "not attempted":  # a model was loaded on the CPU with the fast path on
        what = "quantized products, decode attention, fused layers"
        notes.insert(2, f"MLX extension ({what}): {ext.status()}")
    return notes
