"""Prompt prefill in chunks sized by time, with cancel points between chunks.

MLX cannot abort a graph in flight, so one chunk's compute bounds the cancel
latency. The first chunk is small and timed; later chunks are sized so each
takes about ``target_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import mlx.core as mx

from .sequence import CachedSequence

CancelCheck = Callable[[], None]
Progress = Callable[[int, int], None]


class ChunkSizer:
    """Picks the next prefill chunk length from the last chunk's speed.

    Args:
        target_s: Wanted seconds per chunk.
        first: Length of the first, measuring chunk.
        lo: Smallest chunk.
        hi: Largest chunk (bounds memory of the attention scores).
    """

    # Attention makes later tokens dearer than the last chunk's rate says, so aim
    # a little low and at most double per chunk.
    MARGIN = 0.8
    GROWTH = 2.0

    def __init__(self, target_s: float = 0.25, first: int = 8, lo: int = 1, hi: int = 2048):
        self.target_s, self.lo, self.hi = target_s, lo, hi
        self.size = max(lo, min(first, hi))
        self.largest = 0  # the largest chunk used, for the stats

    def observe(self, n: int, seconds: float) -> None:
        """Record that ``n`` tokens took ``seconds``; resize the next chunk."""
        self.largest = max(self.largest, n)
        rate = n / max(seconds, 1e-6)
        want = min(rate * self.target_s * self.MARGIN, self.GROWTH * max(n, self.size))
        self.size = int(max(self.lo, min(self.hi, want)))


def prefill(
    seq: CachedSequence,
    tokens: Sequence[int],
    *,
    check: CancelCheck,
    progress: Progress,
    sizer: ChunkSizer,
) -> None:
    """Feed ``tokens[:-1]`` beyond what ``seq`` holds, leaving the last token to decode.

    Args:
        seq: The model and cache; ``seq.tokens`` must be a prefix of ``tokens``.
        tokens: The whole prompt.
        check: Raises `Cancelled` when the job is cancelled.
        progress: Called with ``(done, total)`` after each chunk.
        sizer: Chooses chunk lengths.
    """
    total, end = len(tokens), len(tokens) - 1
    progress(len(seq.tokens), total)
    check()
    while len(seq.tokens) < end:
        start = len(seq.tokens)
        chunk = tokens[start : min(end, start + sizer.size)]
        t0 = time.perf_counter()
        seq.forward(chunk)
        mx.eval([c.state for c in seq.cache])
        sizer.observe(len(chunk), time.perf_counter() - t0)
        mx.clear_cache()
        progress(len(seq.tokens), total)
        check()
