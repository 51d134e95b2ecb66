"""Draft sources for speculative decoding: one interface, a factory for each kind.

A source proposes up to k tokens that may follow the committed history. The
verify/accept/rewind logic in `speculative` is shared by all of them. A new
kind of source is a class here and an entry in `SOURCES` (plus its name in the
magics and the Panel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import mlx.core as mx

from ..cache.sequence import CachedSequence, common_prefix
from . import sampling
from .decode import Sampler
from .prefill import CancelCheck, ChunkSizer, Progress, prefill


class DraftSource(Protocol):
    """Proposes draft tokens."""

    needs_prefill: bool
    """Whether `prefill` does real work (it is then run after the first token)."""

    label: str
    """An accepted draft token's source in token records (``prompt-lookup``...)."""

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
    label = "prompt-lookup"  # an accepted draft's source, in token records

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
    label = "draft-model"

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
        seq.checkpoint()  # the next proposal rewinds to here or later
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
        return self.sampler(logits - sampling.logsumexp(logits))


@dataclass
class DraftContext:
    """What a source factory may use.

    Attributes:
        request: The job's request (``lookup_ngram``, ``num_draft_tokens``, ...).
        sampler: The job's sampler.
        draft_seq: The draft model and its cache (kind ``model`` only).
        draft_profile: The draft model's prefill profile (kind ``model`` only).
        session: The main model's index of earlier prompts and outputs.
    """

    request: object
    sampler: Sampler
    draft_seq: CachedSequence | None = None
    draft_profile: object = None
    session: object = None


def _suffix(ctx: DraftContext):
    from .suffix import SuffixDraft

    return SuffixDraft(ctx.session)


SOURCES: dict[str, Callable[[DraftContext], DraftSource]] = {
    "lookup": lambda c: PromptLookup(c.request.lookup_ngram),
    "suffix": _suffix,
    "model": lambda c: DraftModel(
        c.draft_seq, c.sampler, ChunkSizer(c.request.prefill_target_s, c.draft_profile)
    ),
}


def make_source(kind: str, ctx: DraftContext) -> DraftSource | None:
    """The draft source of ``kind`` (None for ``"none"``).

    Raises:
        ValueError: An unknown kind.
    """
    if kind == "none":
        return None
    try:
        return SOURCES[kind](ctx)
    except KeyError:
        raise ValueError(f"draft_kind: unknown source {kind!r}") from None
