"""A model with its KV cache and the exact token list that cache holds."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache


class CachedSequence:
    """Keeps ``cache`` and ``tokens`` in step: the cache holds exactly ``tokens``.

    Every feed and trim goes through here, so after a cancel or an error the
    recorded tokens say what the cache contains.

    Args:
        model: An mlx-lm model.
        cache: Its prompt cache; a fresh one when None.
        tokens: Tokens already in ``cache``.
    """

    def __init__(self, model, cache=None, tokens: Sequence[int] = ()) -> None:
        self.model = model
        self.cache = cache if cache is not None else make_prompt_cache(model)
        self.tokens: list[int] = list(tokens)
        self.passes = 0  # forward passes run through here: what tests count, not time

    @property
    def trimmable(self) -> bool:
        """Whether the cache can be rewound (KV caches can; recurrent ones cannot)."""
        return can_trim_prompt_cache(self.cache)

    def forward(self, ids: Sequence[int] | mx.array) -> mx.array:
        """Run the model on ``ids`` (appended to the cache) and return logits [1, L, V].

        Integer lists are recorded at once. For a lazy ``mx.array`` the caller
        records the values with `record` once it knows them.
        """
        arr = ids if isinstance(ids, mx.array) else mx.array(list(ids), dtype=mx.uint32)
        logits = self.model(arr[None], cache=self.cache)
        self.passes += 1
        if not isinstance(ids, mx.array):
            self.tokens.extend(ids)
        return logits

    def record(self, ids: Sequence[int]) -> None:
        """Record token values fed earlier as a lazy array."""
        self.tokens.extend(ids)

    def trim_to(self, n: int) -> None:
        """Rewind the cache so it holds the first ``n`` recorded tokens."""
        extra = len(self.tokens) - n
        if extra > 0:
            trimmed = trim_prompt_cache(self.cache, extra)
            if trimmed != extra:
                raise RuntimeError(f"cache trimmed {trimmed} of {extra} tokens")
            del self.tokens[n:]

    def copy(self) -> CachedSequence:
        """An independent sequence: the same tokens, its own copy of the cache arrays."""
        import copy

        return CachedSequence(self.model, copy.deepcopy(self.cache), self.tokens)

    @property
    def nbytes(self) -> int:
        """Bytes the KV cache has allocated."""
        return sum(getattr(c, "nbytes", 0) for c in self.cache)

    def consistent(self) -> bool:
        """Whether the cache's own offset agrees with the recorded tokens."""
        offsets = {c.offset for c in self.cache if hasattr(c, "offset")}
        return offsets <= {len(self.tokens)}


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the common prefix of ``a`` and ``b``, known equal up to ``start``."""
    n = min(len(a), len(b))
    i = min(start, n)
    while i < n and a[i] == b[i]:
        i += 1
    return i
