"""Prompt-cache reuse: keep a model's KV cache from its last job, with its tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .prefill import PrefillProfile
from .sequence import CachedSequence, common_prefix


class PromptCache:
    """One model's reusable cache.

    `fetch` hands the cache out, trimmed to the longest common prefix with the new
    prompt; `store` takes it back after the job. Caches that cannot be trimmed
    (rotating or recurrent ones) are never reused.
    """

    def __init__(self) -> None:
        self._seq: CachedSequence | None = None

    @property
    def tokens(self) -> list[int]:
        """Tokens held by the stored cache (empty when none is stored)."""
        return list(self._seq.tokens) if self._seq else []

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored cache."""
        return self._seq.nbytes if self._seq else 0

    def fetch(self, model, tokens: Sequence[int], reuse: bool = True) -> tuple[CachedSequence, int]:
        """Take the cache for a job on ``tokens`` (a fresh one unless ``reuse``).

        Returns:
            ``(seq, reused)``: the sequence holding ``tokens[:reused]``. At least
            the last prompt token is always left to compute.
        """
        seq, self._seq = self._seq, None
        if not reuse or seq is None or seq.model is not model or not seq.trimmable:
            return CachedSequence(model), 0
        keep = min(common_prefix(seq.tokens, tokens), len(tokens) - 1)
        seq.trim_to(keep)
        return seq, keep

    def store(self, seq: CachedSequence) -> None:
        """Keep ``seq`` for the next job, if it is consistent and trimmable."""
        if seq.trimmable and seq.consistent():
            self._seq = seq

    def clear(self) -> None:
        """Drop the stored cache."""
        self._seq = None


@dataclass
class ModelState:
    """What the engine keeps per loaded model between jobs (dropped with the model).

    Attributes:
        cache: Its reusable KV cache.
        prefill: What its prefill chunks cost, for sizing them.
    """

    cache: PromptCache = field(default_factory=PromptCache)
    prefill: PrefillProfile = field(default_factory=PrefillProfile)
