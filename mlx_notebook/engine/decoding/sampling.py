"""Sampling's row work: mlx-lm's sampler, with the CPU fast path's kernels where they apply.

On x86, MLX's CPU backend takes each of these one element at a time over the whole
vocabulary, and they add up to about as much as a one-row step's forward pass at the
bundled model's recommended sampling (temperature 0.2, top-p 0.9; measured here):
``mx.argmax`` 0.14 ms a row (2.0 ms for a batched step's 16), ``mx.logsumexp`` 1.3-1.9
ms, mlx-lm's ``apply_top_p`` 7-10 ms (it sorts the vocabulary), its draw 1.6-1.8 ms. The fast path's
extension (`mlx_notebook.cpu`; kernels in ``argmax.c`` and ``sample.c``) computes each as an MLX
primitive, so a step stays one lazy graph, with results equal bit for bit: the same
algorithms (MLX's exp, sums in MLX's order), vectorized, and a radix sort.

Anything else (no extension loaded, a GPU, arrays that are not float32) takes MLX's and
mlx-lm's own functions unchanged, so every path draws the same tokens from the same key.
``MLX_NOTEBOOK_NATIVE_SAMPLING=0`` does too (read at each call; the rest of the fast
path stays).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
from mlx_lm import sample_utils as su

ENV = "MLX_NOTEBOOK_NATIVE_SAMPLING"


def _native(x: mx.array):
    """The fast path's extension when it can take ``x`` (float32 rows on the CPU), else None.

    Off the CPU nothing of ``mlx_notebook.cpu`` is imported.
    """
    if x.dtype != mx.float32 or x.ndim == 0 or x.size == 0 or mx.default_device() != mx.cpu:
        return None
    from ...cpu.sampling import kernels

    return kernels()


def argmax(logits: mx.array) -> mx.array:
    """Each row's index of its largest logit, as ``mx.argmax(logits, axis=-1)``.

    Args:
        logits: Scores, the vocabulary on the last axis.

    Returns:
        uint32 indices, the shape of ``logits`` without its last axis.
    """
    mod = _native(logits)
    return mx.argmax(logits, axis=-1) if mod is None else mod.argmax_rows(logits)


def logsumexp(logits: mx.array) -> mx.array:
    """``mx.logsumexp(logits, axis=-1, keepdims=True)``.

    Args:
        logits: Scores, the vocabulary on the last axis.

    Returns:
        The shape of ``logits`` with a last axis of one.
    """
    mod = _native(logits)
    if mod is None:
        return mx.logsumexp(logits, axis=-1, keepdims=True)
    return mod.logsumexp_rows(logits)


def apply_top_p(logprobs: mx.array, top_p: float) -> mx.array:
    """mlx-lm's ``apply_top_p``: tokens outside the nucleus set to -inf.

    Args:
        logprobs: Log-probabilities, the vocabulary on the last axis.
        top_p: The nucleus' share of the probability mass, in (0, 1).

    Returns:
        ``logprobs`` with every token below the nucleus at -inf.
    """
    mod = _native(logprobs)
    return su.apply_top_p(logprobs, top_p) if mod is None else mod.top_p_rows(logprobs, top_p)


def categorical_sampling(logits: mx.array, temp: float) -> mx.array:
    """mlx-lm's ``categorical_sampling``: a draw from ``softmax(logits / temp)``.

    For one row MLX draws by inverse CDF from one uniform number of its global random
    sequence; the kernel takes that same number (``mx.random.uniform``, the draw
    MLX's own sampler would make) and does the rest, so the token is MLX's.

    Args:
        logits: One row's scores (``[1, vocabulary]``); several rows take MLX's path.
        temp: Temperature, above 0.

    Returns:
        The token, shaped as ``mx.random.categorical`` shapes it.
    """
    mod = _native(logits)
    if mod is None or logits.ndim < 2 or logits.size != logits.shape[-1]:
        return su.categorical_sampling(logits, temp)
    return mod.categorical_rows(logits, mx.random.uniform(shape=(1,)), 1.0 / temp)


def make_sampler(
    temp: float = 0.0, top_p: float = 0.0, min_p: float = 0.0, top_k: int = 0
) -> Callable[[mx.array], mx.array]:
    """mlx-lm's ``make_sampler``, with its nucleus filter and its draw on the fast path's kernels.

    The same filters in the same order (top-p, min-p, top-k), then the same draw
    (``categorical_sampling``, from MLX's random state), so a seed gives the same tokens
    with the fast path on or off.

    Args:
        temp: Temperature; 0 picks the argmax.
        top_p: Nucleus share in (0, 1); anything else turns it off.
        min_p: Min-p threshold; 0 turns it off.
        top_k: Tokens kept by top-k; 0 turns it off.

    Returns:
        ``sampler(logprobs) -> tokens``.
    """
    if temp == 0:
        return argmax
    filters = _filters(top_p, min_p, top_k)

    def sampler(logprobs: mx.array) -> mx.array:
        for f in filters:
            logprobs = f(logprobs)
        return categorical_sampling(logprobs, temp)

    sampler.settings = (temp, top_p, min_p, top_k)  # read by `draw_rows`
    return sampler


def _filters(top_p: float, min_p: float, top_k: int) -> list[Callable[[mx.array], mx.array]]:
    """mlx-lm's filters in its order (top-p, min-p, top-k), the ones these values turn on."""
    filters: list[Callable[[mx.array], mx.array]] = []
    if 0 < top_p < 1.0:
        filters.append(lambda x: apply_top_p(x, top_p))
    if min_p != 0.0:
        filters.append(lambda x: su.apply_min_p(x, min_p, 1))
    if top_k > 0:
        filters.append(lambda x: su.apply_top_k(x, top_k))
    return filters


def draw_rows(
    logprobs: mx.array, samplers: Sequence[Callable], keys: Sequence[Callable[[], None]]
) -> mx.array | None:
    """One token per row, the one ``samplers[i](logprobs[i : i + 1])`` draws, in a few calls.

    Rows whose samplers (`make_sampler`'s) have the same settings go through each filter
    and the draw together, one kernel call each, their rows split over the threads,
    where row after row took a call per row and piece. The rows' uniform numbers are
    drawn first, in row order, each right after ``keys[i]()`` (a seeded job keys its
    position there): the global random sequence is used as row after row uses it, so
    each row gets the token it draws alone.

    Args:
        logprobs: ``[rows, vocabulary]`` log-probabilities.
        samplers: Each row's sampler, from `make_sampler` with a temperature above 0.
        keys: Each row's call that sets its random key (or does nothing).

    Returns:
        uint32 tokens ``[rows]``; None where the kernels do not apply (no extension, not
        float32 on the CPU, or a sampler `make_sampler` did not make): go row by row.
    """
    settings = [getattr(s, "settings", None) for s in samplers]
    mod = _native(logprobs)
    if mod is None or logprobs.ndim != 2 or None in settings:
        return None
    uniforms = []
    for key in keys:
        key()
        uniforms.append(mx.random.uniform(shape=(1,)))
    u = mx.concatenate(uniforms)
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(settings):
        groups.setdefault(s, []).append(i)
    drawn, order = [], []
    for (temp, top_p, min_p, top_k), rows in groups.items():
        pick = None if len(groups) == 1 else mx.array(rows)
        x = logprobs if pick is None else logprobs[pick]
        for f in _filters(top_p, min_p, top_k):
            x = f(x)
        drawn.append(mod.categorical_rows(x, u if pick is None else u[pick], 1.0 / temp))
        order += rows
    if len(drawn) == 1:
        return drawn[0]
    back = sorted(range(len(order)), key=order.__getitem__)  # group order -> row order
    return mx.concatenate(drawn)[mx.array(back)]
