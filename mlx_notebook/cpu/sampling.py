"""Sampling's row kernels on the CPU fast path (used by `mlx_notebook.engine.decoding.sampling`).

The extension computes the greedy pick, logsumexp, the nucleus filter and the draw
as MLX primitives, bit for bit as MLX and mlx-lm do (``kernels/argmax.c``,
``kernels/sample.c``). ``MLX_NOTEBOOK_NATIVE_SAMPLING=0`` leaves them unused (read at
each call; the rest of the fast path stays).
"""

from __future__ import annotations

from .. import config
from . import ext as _ext

ENV = "MLX_NOTEBOOK_NATIVE_SAMPLING"


def kernels():
    """The loaded extension, or None (not loaded by a CPU model, or turned off). Never builds."""
    mod = _ext.loaded()
    return mod if mod is not None and config.enabled(ENV) else None
