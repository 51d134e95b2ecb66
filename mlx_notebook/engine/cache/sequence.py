"""A model with its cache and the exact token list that cache holds.

Rewinding (rejected drafts, a shorter prompt) trims full-attention caches. A
sliding window past its length or a recurrent state cannot be trimmed; it is
restored from a `caches.Snapshot` taken at a checkpoint, and the tokens from
there to the rewind point are kept *pending*: recorded, not yet in the cache,
and fed in front of the next forward pass (one pass instead of a replay pass).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from .caches import Snapshot, always_trimmable, copy_cache, trims_exactly

_passes = [0]  # every forward pass of any model in this process (the worker's only)


def count_pass(n: int = 1) -> None:
    """Count ``n`` forward passes (the worker thread calls this; tests read the total)."""
    _passes[0] += n


def forward_passes() -> int:
    """Forward passes run so far in this process (prefill chunks, steps, verify passes)."""
    return _passes[0]


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
        self.pending: list[int] = []  # the last of ``tokens``, not yet fed to the cache
        self.passes = 0  # forward passes run through here: what tests count, not time
        self.replayed = 0  # pending tokens fed again after a restore
        self._fresh = 0  # pending tokens from `defer`, at the end: never fed, not replays
        self._mark: Snapshot | None = None
        self._plain = always_trimmable(self.cache)

    MAX_PENDING = 32  # past this, a checkpoint feeds them first (bounds the next pass)

    @property
    def trimmable(self) -> bool:
        """Whether the cache can be rewound (KV caches can; recurrent ones cannot)."""
        return trims_exactly(self.cache)

    def forward(self, ids: Sequence[int] | mx.array) -> mx.array:
        """Run the model on ``ids`` (appended to the cache) and return logits [1, L, V].

        Integer lists are recorded at once. For a lazy ``mx.array`` the caller
        records the values with `record` once it knows them.
        """
        arr = ids if isinstance(ids, mx.array) else mx.array(list(ids), dtype=mx.uint32)
        pend = len(self.pending)
        if pend:
            arr = mx.concatenate([mx.array(self.pending, dtype=mx.uint32), arr.astype(mx.uint32)])
        # Bookkeeping after the call: a pass stopped partway (`layer_gates`) changes nothing.
        logits = self.model(arr[None], cache=self.cache)
        if pend:
            self.replayed += pend - self._fresh
            self.pending, self._fresh = [], 0
        self.passes += 1
        count_pass()
        if not isinstance(ids, mx.array):
            self.tokens.extend(ids)
        return logits[:, pend:] if pend else logits

    @property
    def rewinds_anywhere(self) -> bool:
        """Whether every layer trims at any length (full attention only)."""
        return self._plain

    @property
    def held(self) -> int:
        """Tokens actually in the cache (``tokens`` less the pending ones)."""
        return len(self.tokens) - len(self.pending)

    def checkpoint(self) -> None:
        """Remember this point, so `trim_to` can come back here on any cache kind.

        A no-op for caches that trim at any length (full attention only).
        """
        if self._plain:
            return
        if len(self.pending) > self.MAX_PENDING or (self.pending and self._mark is None):
            mx.eval(self.forward([]))  # no mark to replay them from: feed them now
        if not self.pending:  # with tokens pending, the cache is still at the mark
            self._mark = Snapshot(self.cache, len(self.tokens))

    def defer(self, ids: Sequence[int]) -> None:
        """Record ``ids`` now and feed them in front of the next pass (one pass for all)."""
        self.tokens.extend(ids)
        self.pending.extend(ids)
        self._fresh += len(ids)

    def record(self, ids: Sequence[int]) -> None:
        """Record token values fed earlier as a lazy array."""
        self.tokens.extend(ids)

    def trim_to(self, n: int) -> None:
        """Rewind so the sequence holds the first ``n`` recorded tokens.

        Raises:
            RuntimeError: The cache cannot be trimmed there and no checkpoint
                at or before ``n`` was taken.
        """
        if n >= len(self.tokens):
            return
        held = self.held
        if n >= held:  # only pending tokens go
            del self.pending[n - held :]
        elif trims_exactly(self.cache):
            trimmed = trim_prompt_cache(self.cache, held - n)
            if trimmed != held - n:
                raise RuntimeError(f"cache trimmed {trimmed} of {held - n} tokens")
            self.pending = []
        elif self._mark is not None and self._mark.n <= n:
            self._mark.restore(self.cache)
            self.pending = self.tokens[self._mark.n : n]
        else:
            raise RuntimeError(f"cannot rewind this cache from {held} to {n} tokens")
        del self.tokens[n:]
        self._fresh = min(self._fresh, len(self.pending))

    def drop_partial(self) -> None:
        """Trim the layers a pass stopped partway had fed, back to `held` tokens.

        Full-attention caches only (`layer_gates.points`): they trim at any length.
        """
        for c in self.cache:
            extra = c.offset - self.held
            if extra > 0:
                c.trim(extra)

    def settle(self) -> None:
        """Forget pending tokens (the cache holds the rest), e.g. before storing it."""
        if self.pending:
            del self.tokens[self.held :]
            self.pending, self._fresh = [], 0

    def snapshot(self) -> CachedSequence:
        """An independent sequence at this point (pending tokens left out)."""
        return CachedSequence(self.model, copy_cache(self.cache), self.tokens[: self.held])

    def copy(self) -> CachedSequence:
        """An independent sequence: the same tokens, its own copy of the cache arrays."""
        out = CachedSequence(self.model, copy_cache(self.cache), self.tokens)
        out.pending = list(self.pending)
        return out

    @property
    def nbytes(self) -> int:
        """Bytes the KV cache has allocated."""
        return sum(getattr(c, "nbytes", 0) for c in self.cache)

    def consistent(self) -> bool:
        """Whether the cache's own offset agrees with the recorded tokens."""
        offsets = {c.offset for c in self.cache if isinstance(getattr(c, "offset", None), int)}
        return offsets <= {self.held}


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the common prefix of ``a`` and ``b``, known equal up to ``start``."""
    n = min(len(a), len(b))
    i = min(start, n)
    while i < n and a[i] == b[i]:
        i += 1
    return i
