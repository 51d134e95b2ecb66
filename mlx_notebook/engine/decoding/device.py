"""What a job asks of the device beyond MLX: the thread governor and the fast path's extras.

On the CPU these come from the optional fast path (``mlx_notebook.cpu``, imported only
there): a governor that picks the CPU libraries' thread count, and the RoPE tables it
gave a model. On Metal or CUDA nothing of ``cpu/`` is imported: the governor has nothing
to govern and a model has no tables.
"""

from __future__ import annotations

from ...models.loader import on_cpu

__all__ = ["IdleGovernor", "governor", "on_cpu", "rope_tables"]


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
