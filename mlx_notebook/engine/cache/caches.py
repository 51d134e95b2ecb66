"""Cache protocols for every mlx-lm cache type: batch them, rewind them, snapshot them.

A model's cache is a list of per-layer caches of several kinds: full attention
(``KVCache``), sliding windows (``RotatingKVCache``), recurrent state
(``ArraysCache``: gated delta, Mamba, convolutions), and ``CacheList`` nesting
several. Each kind batches through its own ``merge`` (``KVCache`` →
``BatchKVCache``, ``RotatingKVCache`` → ``BatchRotatingKVCache`` ...), and rows
come back out with the batch type's ``extract``, as mlx-lm's ``BatchGenerator``
does; a kind with no ``merge`` cannot join a batch.

Rewinding is the other half. Full-attention caches trim in O(1). A sliding
window past its length, or a recurrent state, cannot be trimmed: it is
restored from a snapshot taken before the tokens to undo, and the tokens to
keep are fed again (`sequence.CachedSequence`). A snapshot holds references:
MLX arrays are immutable, and caches replace (not modify) them on a multi-token
update; views guard the in-place single-token writes.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, can_trim_prompt_cache

try:  # optional kinds: older mlx-lm releases lack some of them
    from mlx_lm.models.cache import ConcatenateKVCache, QuantizedKVCache
except ImportError:  # pragma: no cover - depends on the mlx-lm version
    ConcatenateKVCache = QuantizedKVCache = KVCache

TRIMMABLE = (KVCache, QuantizedKVCache, ConcatenateKVCache)  # trim works at any length


def layers(cache) -> list:
    """The leaf caches of ``cache`` (a model's list), ``CacheList`` children flattened."""
    out = []
    for c in cache:
        out.extend(layers(c.caches) if isinstance(c, CacheList) else [c])
    return out


def trims_exactly(cache) -> bool:
    """Whether mlx-lm's trim rewinds ``cache`` exactly (here: to any prefix it holds).

    mlx-lm's own check says yes for a chunked cache (Llama 4's `ChunkedKVCache`), but its
    trim only takes back what the current chunk still holds, and once its front was
    dropped, the tokens before the trim point are gone: it is rewound from a snapshot,
    as a sliding window is.
    """
    if not can_trim_prompt_cache(cache):
        return False
    return not any(type(c).__name__ == "ChunkedKVCache" for c in layers(cache))


def always_trimmable(cache) -> bool:
    """Whether every layer can be rewound by any number of tokens, at any length."""
    return all(isinstance(c, TRIMMABLE) for c in layers(cache))


def unbatchable(cache) -> str | None:
    """None when every layer can join a batch, else the first kind that cannot."""
    for c in layers(cache):
        if not callable(getattr(type(c), "merge", None)):
            return type(c).__name__
    return None


def merge(rows: list[list]) -> list:
    """One batched cache per layer from several rows' caches, by each kind's ``merge``."""
    return [type(per[0]).merge(list(per)) for per in zip(*rows)]


def extract(batch: list, i: int) -> list:
    """Row ``i`` of a batched cache, as that row's own cache of the original kinds."""
    return [c.extract(i) for c in batch]


def prepare_padding(batch: list, lengths: list[int], padding: list[int]) -> None:
    """Right-padded prompts: every kind learns each row's real length, as mlx-lm does."""
    for c in batch:
        c.prepare(lengths=lengths, right_padding=padding)


def finalize(batch: list) -> None:
    """After a right-padded pass: move the padding in front (attention) or drop it."""
    for c in batch:
        c.finalize()


def _view(x):
    return x[...] if isinstance(x, mx.array) else x


def _read_only_state(c) -> bool:
    prop = getattr(type(c), "state", None)
    return isinstance(prop, property) and prop.fset is None


def _save(c):
    if isinstance(c, TRIMMABLE):  # trimming back is exact and O(1)
        return ("trim", c.offset)
    if isinstance(c, CacheList):
        return [_save(x) for x in c.caches]
    if isinstance(c, ArraysCache):  # the model rebinds its entries: references suffice
        return (list(c.cache), c.left_padding, c.lengths)
    if _read_only_state(c):  # a model's own cache class (deepseek_v41's): its attributes
        return ("attrs", {k: _view(v) for k, v in vars(c).items()})
    state = c.state
    state = tuple(_view(x) for x in state) if isinstance(state, tuple) else _view(state)
    return (state, getattr(c, "meta_state", None))


def _load(c, saved) -> None:
    if isinstance(c, TRIMMABLE):
        c.trim(c.offset - saved[1])
    elif isinstance(c, CacheList):
        for x, s in zip(c.caches, saved):
            _load(x, s)
    elif isinstance(c, ArraysCache):
        c.cache, c.left_padding, c.lengths = list(saved[0]), saved[1], saved[2]
    elif saved[0] == "attrs":
        vars(c).update(saved[1])
    else:
        c.state = saved[0]
        if saved[1] is not None:
            c.meta_state = saved[1]


class Snapshot:
    """A cache's state at one point, to come back to without trimming.

    Args:
        cache: A model's cache (list of layers).
        n: Tokens the cache holds now.
    """

    def __init__(self, cache: list, n: int) -> None:
        self.n = n
        self._saved = [_save(c) for c in cache]

    def restore(self, cache: list) -> None:
        """Bring ``cache`` back to this snapshot's ``n`` tokens.

        Full-attention layers are trimmed; the others get their saved state back.
        """
        for c, saved in zip(cache, self._saved):
            _load(c, saved)


def copy_cache(cache: list) -> list:
    """An independent cache at the same point, sharing no array a later write may change."""
    import copy

    out = []
    for c in cache:
        new = copy.copy(c)
        if isinstance(c, CacheList):
            new.caches = tuple(copy_cache(list(c.caches)))
        elif isinstance(c, KVCache):
            # A view of the filled part: the next write into either copies once.
            if c.keys is not None:
                new.keys, new.values = c.keys[..., : c.offset, :], c.values[..., : c.offset, :]
        elif isinstance(c, TRIMMABLE):
            new = copy.deepcopy(c)
        else:
            _load(new, _save(c))
        out.append(new)
    return out
