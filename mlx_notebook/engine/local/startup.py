"""The worker's start: the batch it has before MLX, and its first imports of MLX.

The engine's module imports no MLX, so the first cell of a fresh kernel returns at
once; the worker imports MLX when it starts, and until then the scheduler holds an
empty `NoBatch`.
"""

from __future__ import annotations

import time


def import_mlx():
    """MLX, mlx-lm's generation stream and the batch: the worker's first imports.

    The kernel's thread may import parts of mlx-lm at the same moment (a user's cell);
    Python then refuses one of the two imports as a deadlock (``_DeadlockError``) rather
    than wait in a cycle. The other import completes, so the worker tries again.
    """
    for attempt in range(100):
        try:
            import mlx.core as mx
            from mlx_lm.generate import generation_stream

            from .batch import Batch

            return mx, generation_stream, Batch
        except RuntimeError as exc:
            if "deadlock detected" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")  # pragma: no cover


class NoBatch:
    """The batch before the worker has imported MLX: empty, read like `Batch`."""

    main = None
    model_name = None
    rows: tuple = ()
    jobs: tuple = ()

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows

    @property
    def room(self) -> int:
        """Rows that can be admitted."""
        return self.max_rows

    def __bool__(self) -> bool:
        return False

    def fail_all(self, reason: str, error: str | None = None, exc=None) -> None:
        """Nothing to end: no row was ever admitted."""
