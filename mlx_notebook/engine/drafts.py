"""Draft sources for speculative decoding: one interface, two implementations.

A source proposes up to k tokens that may follow the committed history. The
verify/accept/rewind logic in `speculative` is shared by both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import mlx.core as mx

from .decode import Sampler
from .prefill import CancelCheck, ChunkSizer, Progress, prefill
from .sequence import CachedSequence, common_prefix


class DraftSource(Protocol):
    """Proposes draft tokens."""

    needs_prefill: bool
    """Whether `prefill` does real work (it is then run after the first token)."""

    def prefill(self, prompt: Sequence[int], check: CancelCheck, progress: Progress) -> None:
        """Prepare for ``prompt`` (a draft model fills its cache with all but its last token)."""

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Return at most ``k`` tokens likely to follow ``history`` ([] for none)."""


class PromptLookup:
    """Prompt-lookup drafting: copy what followed the last n-gram's latest earlier match.

    The n-gram index grows incrementally, so a step costs O(new tokens).

    Args:
        ngram: Length of the n-gram to match, 1..8.
    """

    needs_prefill = False

    def __init__(self, ngram: int = 3) -> None:
        self.n = ngram
        self._index: dict[tuple[int, ...], int] = {}
        self._indexed = 0

    def prefill(self, prompt: Sequence[int], check: CancelCheck, progress: Progress) -> None:
        """Nothing to compute: the index is built on first use."""

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Tokens after the most recent earlier occurrence of the history's last n-gram."""
        n = self.n
        if len(history) <= n:
            return []
        # Index n-grams that have at least one following token; later starts overwrite
        # earlier ones, so a lookup finds the most recent occurrence.
        limit = len(history) - n
        for i in range(self._indexed, limit):
            self._index[tuple(history[i : i + n])] = i
        self._indexed = max(self._indexed, limit)
        i = self._index.get(tuple(history[-n:]))
        if i is None:
            return []
        return list(history[i + n : i + n + k])


class DraftModel:
    """A small model with the same vocabulary drafts greedily or with the sampler.

    Its cache is re-synced to the committed history before each proposal by
    trimming to the longest common prefix, which covers rejected drafts and the
    all-accepted case alike.

    Args:
        seq: The draft model and its cache.
        sampler: The job's sampler (mlx-lm drafts with the same one).
        sizer: Chunk sizer for its prefill.
    """

    needs_prefill = True

    def __init__(self, seq: CachedSequence, sampler: Sampler, sizer: ChunkSizer) -> None:
        self.seq = seq
        self.sampler = sampler
        self.sizer = sizer
        self._synced = 0

    def prefill(self, prompt: Sequence[int], check: CancelCheck, progress: Progress) -> None:
        """Prefill the draft cache with ``prompt[:-1]`` in time-sized chunks."""
        prefill(self.seq, prompt, check=check, progress=progress, sizer=self.sizer)
        self._synced = len(self.seq.tokens)

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Draft ``k`` tokens autoregressively after ``history``."""
        if k <= 0:
            return []
        seq = self.seq
        keep = min(common_prefix(seq.tokens, history, self._synced), len(history) - 1)
        seq.trim_to(keep)
        logits = seq.forward(list(history[keep:]))
        ys = []
        y = self._sample(logits)
        for i in range(k):
            ys.append(y)
            if i + 1 < k:
                y = self._sample(seq.forward(y))
            mx.async_eval(y)
        drafts = mx.concatenate(ys).tolist()
        seq.record(drafts[:-1])
        self._synced = len(history)
        return drafts

    def _sample(self, logits: mx.array) -> mx.array:
        logits = logits[:, -1, :]
        return self.sampler(logits - mx.logsumexp(logits, keepdims=True))
