"""What a job asks of the device beyond MLX: the thread governor and the fast path's extras.

On the CPU these come from the optional fast path (``mlx_notebook.cpu``, imported only
there): a governor that picks the CPU libraries' thread count, and the RoPE tables it
gave a model. On Metal or CUDA nothing of ``cpu/`` is imported: the governor has nothing
to govern and a model has no tables.
"""

from __future__ import annotations

from contextlib import nullcontext

from ...models.loader import on_cpu

__all__ = [
    "IdleGovernor", "governor", "on_cpu", "prefill_8_bit", "prefill_pass", "release_freed",
    "rope_tables",
]  # fmt: skip


class IdleGovernor:
    """The governor where there is nothing to govern (a GPU): every call does nothing."""

    active = False

    def step(self) -> None:
        """A decode step ended."""

    def reset(self) -> None:
        """Decoding paused."""

    def prefill_chunk(self) -> None:
        """A prefill chunk starts or ended."""

    def line(self) -> str:
        """``%mlx status``'s line."""
        return "threads: the GPU's (nothing to govern)"


_IDLE = IdleGovernor()


def governor():
    """The CPU's thread governor (`mlx_notebook.cpu.threads`), or an idle one off the CPU."""
    if not on_cpu():
        return _IDLE
    from ...cpu.threads import governor as cpu_governor

    return cpu_governor()


def rope_tables(model) -> list:
    """The RoPE tables the CPU fast path gave ``model`` ([] for a model it did not patch)."""
    if not getattr(model, "_mlxnb_fast", None):
        return []
    from ...cpu.fast import rope_tables as tables

    return tables(model)


def prefill_pass(model):
    """A context in which ``model``'s passes are a prefill's.

    On the CPU fast path, quantized products on 8-bit inputs
    (`mlx_notebook.cpu.quant.prefill_pass`); elsewhere nothing.
    """
    if not getattr(model, "_mlxnb_fast", None):
        return nullcontext()
    from ...cpu.quant import prefill_pass as cpu_pass

    return cpu_pass()


def prefill_8_bit(model) -> bool:
    """Whether ``model``'s prefill passes round its quantized products' inputs to 8 bits."""
    if not getattr(model, "_mlxnb_fast", None):
        return False
    from ...cpu.ext import prefill_inputs8

    return prefill_inputs8()


def release_freed() -> None:
    """On the CPU, hand memory MLX freed back to the system: its buffer cache, then glibc's.

    On the CPU, MLX's buffers come from malloc, and glibc keeps what was freed below
    its mmap threshold (which grows to 32 MiB as large blocks are freed) in its heaps:
    after a 1B model's 512-token prefill, 90 MiB of them stayed resident, where the
    next allocations (the KV of later prompts) did not reuse them. Called after a
    prefill and when the worker goes idle, not per chunk: the chunks reuse each
    other's blocks. Worker thread only.
    """
    if not on_cpu():
        return  # Metal and CUDA keep their buffer caches as mlx-lm does
    import mlx.core as mx

    from ...cpu.pages import trim

    mx.clear_cache()  # MLX's own cache of freed buffers first
    trim()
