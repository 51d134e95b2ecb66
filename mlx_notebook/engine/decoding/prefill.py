"""Prompt prefill in chunks sized by throughput and time, with cancel points between chunks.

MLX cannot abort a graph in flight, so the compute between two cancel points
bounds the Stop latency: it must fit the time target. Cancel points come between
chunks, and, where the cache can roll a partial pass back (`layer_gates`), every
few layers inside a chunk; a chunk may then run as long as its layers allow,
within `ChunkSizer.HOLD_S`. Within those bounds, bigger chunks
amortize the fixed cost of a forward pass (reading every weight), but attention
makes each token of a chunk dearer the longer the chunk: on a CPU, one chunk
of 1,500 tokens runs slower than chunks of 128. A per-model cost model, learned
from every chunk any job prefills, gives both limits:

    t(n, p) = g + a * n + b * n * (p + n / 2)

for a chunk of ``n`` tokens starting at position ``p``: a fixed cost ``g``,
per-token compute ``a``, and attention ``b`` over the tokens before each one.
Throughput ``n / t`` peaks at ``n* = sqrt(2 g / b)``; the time target caps ``n``
where ``t`` reaches it. A new model's first chunk is small, to measure it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext

import mlx.core as mx

from ..cache.sequence import CachedSequence
from ..errors import Cancelled
from . import layer_gates
from .device import governor

CancelCheck = Callable[[], None]
Progress = Callable[[int, int], None]

# What chunks are timed with. Read at each call, so tests can put a virtual clock here
# and get chunk sizes that follow a cost model exactly, whatever the machine's load.
clock: Callable[[], float] = time.perf_counter


class PrefillProfile:
    """What prefill chunks cost on one model, fitted from recent observations.

    Args:
        keep: Observations kept (the most recent).
    """

    def __init__(self, keep: int = 64) -> None:
        self.obs: deque[tuple[int, int, float]] = deque(maxlen=keep)
        self.coef: tuple[float, float, float] | None = None
        self.largest = 0  # the longest chunk measured: the fit is not trusted far past it

    def observe(self, n: int, pos: int, seconds: float) -> None:
        """Record a chunk of ``n`` tokens at position ``pos`` that took ``seconds``."""
        self.obs.append((n, pos, seconds))
        self.largest = max(self.largest, n)
        self.coef = self._fit()

    def predict(self, n: int, pos: int) -> float | None:
        """Seconds for a chunk of ``n`` tokens at ``pos``, or None before a fit."""
        if self.coef is None:
            return None
        g, a, b = self.coef
        return g + a * n + b * n * (pos + n / 2)

    def best(self) -> float:
        """The chunk length of highest throughput.

        inf when the fit has no fixed cost or no attention cost: nothing then makes
        small chunks pay (with ``g = 0`` the formula's "peak" is a chunk of no tokens),
        and the time target alone sizes them.
        """
        if self.coef is None:
            return math.inf
        g, _, b = self.coef
        return math.sqrt(2 * g / b) if g > 0 and b > 0 else math.inf

    def largest_within(self, seconds: float, pos: int) -> float | None:
        """The longest chunk at ``pos`` predicted to take at most ``seconds``."""
        if self.coef is None:
            return None
        g, a, b = self.coef
        room = seconds - g
        if room <= 0:
            return 1.0
        lin = a + b * pos
        if b <= 0:
            return room / lin if lin > 0 else math.inf
        # The positive root of b/2 n^2 + lin n - room = 0, in the form that does not
        # cancel when b is tiny (-lin + sqrt(...) loses every digit as b -> 0).
        return 2 * room / (lin + math.sqrt(lin * lin + 2 * b * room))

    def _fit(self) -> tuple[float, float, float] | None:
        # Least squares on [1, n, n (p + n/2)], coefficients kept non-negative.
        rows = [(1.0, float(n), n * (p + n / 2)) for n, p, _ in self.obs]
        ys = [t for _, _, t in self.obs]
        if len({n for n, _, _ in self.obs}) < 2:
            n, _, t = self.obs[-1]
            return (0.0, t / n, 0.0)  # one size seen: all per-token, for now
        fits = []
        for keep in _SUBSETS:  # non-negative least squares by trying every subset of terms
            coef = _lstsq([[r[i] for i in keep] for r in rows], ys)
            if coef is None or any(c < 0 for c in coef):
                continue
            full = [0.0, 0.0, 0.0]
            for i, c in zip(keep, coef):
                full[i] = c
            err = sum((sum(f * x for f, x in zip(full, r)) - y) ** 2 for r, y in zip(rows, ys))
            fits.append((err, len(keep), tuple(full)))
        if not fits:
            return None
        # The fewest terms among the fits as good as the best up to rounding: on times
        # that one term explains exactly, the others fit rounding errors (a fixed cost
        # of 1e-17 and an attention term of 2e-22 were seen), which then size chunks.
        least = min(err for err, _, _ in fits)
        tol = least + 1e-12 * sum(y * y for y in ys)
        return min((n, err, c) for err, n, c in fits if err <= tol)[2]


_SUBSETS = [(0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,)]


def _lstsq(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    # Gaussian elimination with partial pivoting; k <= 3.
    m = [ata[i] + [aty[i]] for i in range(k)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-18:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


class ChunkSizer:
    """Picks prefill chunk lengths from the model's cost profile and the time target.

    Args:
        target_s: Most seconds per chunk (what a Stop may have to wait).
        profile: The model's shared profile; a private one when None.
        first: Length of the first chunk for a model not yet measured.
        lo: Smallest chunk.
        hi: Largest chunk (bounds the memory of the attention scores).
        window: With ``grid``: chunks ending before this position end where time says.
        grid: Past ``window``, chunks end on multiples of this instead (0: never).
            For a model whose passes over several tokens differ from single steps
            (`padding.multi_token_problem`), where a chunk begins changes the text once
            the sliding window is full; ending chunks where mlx-lm's ``generate_step``
            ends its prefill passes gives its text, whatever the machine's load.
    """

    # Aim under the target: one chunk's time varies with the machine's load.
    MARGIN = 0.8
    # Most seconds for a chunk with cancel points inside: progress and pending calls
    # still wait for all of it (a Stop does not; rows decoding beside it keep
    # `target_s`). Each chunk reads (or widens) every weight once: at 2 s a 1B model's
    # chunks held 65-120 tokens, and 4 s prefilled 512 tokens 1.17x (float32) and
    # 1.15x (Q4_0) as fast (benchmarks/bench_hold.py, 5 pairs, bench_scale.py's model).
    HOLD_S = 4.0

    def __init__(
        self,
        target_s: float = 0.25,
        profile: PrefillProfile | None = None,
        first: int = 8,
        lo: int = 1,
        hi: int = 2048,
        window: int = 0,
        grid: int = 0,
    ) -> None:
        self.target_s, self.lo, self.hi = target_s, lo, hi
        self.window, self.grid = window, grid
        self.profile = profile if profile is not None else PrefillProfile()
        self.first = max(lo, min(first, hi))
        self.largest = 0  # the largest chunk used, for the stats
        self._last = 0

    def size_at(self, pos: int, points: int = 1) -> int:
        """The next chunk's length when prefilling from position ``pos``.

        Args:
            pos: Where the chunk starts.
            points: Stretches between cancel points in a chunk (its layers, where
                gated): each must fit the target, the whole chunk `HOLD_S`.
        """
        want = self._timed(pos, points)
        if self.grid and pos + want >= self.window:  # it would end past the window
            return self.grid - pos % self.grid
        return want

    def _timed(self, pos: int, points: int) -> int:
        p = self.profile
        most = self.target_s if points <= 1 else min(self.target_s * points, self.HOLD_S)
        fit = p.largest_within(most * self.MARGIN, pos)
        if fit is None:
            return self.first
        want = min(fit, p.best(), self.hi)
        # Grow at most 4x per chunk within a prefill, and at most 4x past the longest
        # chunk ever measured: a young fit (a short warm-up prompt) extrapolates wildly,
        # and one chunk of a whole long prompt would hold a Stop for seconds.
        grown = self._last or p.largest
        if grown:
            want = min(want, 4 * max(grown, self.first // 4))
        return int(max(self.lo, want))

    def every(self, n: int, pos: int, layers: int) -> int:
        """Layers between cancel points in ``n`` tokens at ``pos``: each stretch fits the target."""
        t = self.profile.predict(n, pos)
        if not t or t <= 0:
            return 1
        return max(1, int(layers * self.target_s * self.MARGIN / t))

    @property
    def size(self) -> int:
        """The next chunk's length at position 0."""
        return self.size_at(0)

    def observe(self, n: int, seconds: float, pos: int = 0) -> None:
        """Record that ``n`` tokens at ``pos`` took ``seconds``."""
        self.largest = max(self.largest, n)
        self._last = n
        self.profile.observe(n, pos, seconds)


def prefill_steps(
    seq: CachedSequence,
    tokens: Sequence[int],
    *,
    progress: Progress,
    sizer: ChunkSizer,
    stop: Callable[[], bool] | None = None,
    alone: Callable[[], bool] = lambda: True,
) -> Iterator[int]:
    """Feed ``tokens[:-1]`` beyond what ``seq`` holds, one chunk per iteration.

    Yields after each chunk (its length), a point where the caller may stop: the
    cache then holds exactly ``seq.tokens``. The last token is left to decode.
    When ``stop`` turns true inside a gated chunk, the chunk is rolled back and
    the steps end early (the caller's next check sees the Stop).

    Args:
        seq: The model and cache; ``seq.tokens`` must be a prefix of ``tokens``.
        tokens: The whole prompt.
        progress: Called with ``(done, total)`` before the first chunk and after each.
        sizer: Chooses chunk lengths.
        stop: Whether the job was stopped; with it, chunks get cancel points
            between layers where the cache allows (`layer_gates`).
        alone: Whether nothing else waits for each chunk (other rows' decode
            steps do): only then are chunks sized past the time target.
    """
    total, end = len(tokens), len(tokens) - 1
    progress(len(seq.tokens), total)
    if len(seq.tokens) < end:
        governor().prefill_chunk()  # starts the meter's window
    layers = layer_gates.points(seq.model, seq.cache) if stop is not None else 0
    if layers:
        layer_gates.install(seq.model)
    while len(seq.tokens) < end:
        start = len(seq.tokens)
        gated = layers > 1 and alone()
        chunk = tokens[start : min(end, start + sizer.size_at(start, layers if gated else 1))]
        gate = nullcontext()
        if gated:
            gate = layer_gates.opened(stop, sizer.every(len(chunk), start, layers), layers)
        t0 = clock()
        try:
            with gate:
                seq.forward(chunk)
                mx.eval([c.state for c in seq.cache])
        except layer_gates.Aborted:
            seq.drop_partial()
            return
        sizer.observe(len(chunk), clock() - t0, start)
        governor().prefill_chunk()  # other processes took the cores meanwhile: yield them
        mx.clear_cache()
        progress(len(seq.tokens), total)
        yield len(chunk)


def prefill(
    seq: CachedSequence,
    tokens: Sequence[int],
    *,
    check: CancelCheck,
    progress: Progress,
    sizer: ChunkSizer,
    stop: Callable[[], bool] | None = None,
    alone: Callable[[], bool] = lambda: True,
) -> None:
    """`prefill_steps` to the end, with ``check`` (raises `Cancelled`) before and between chunks.

    ``stop`` and ``alone`` are `prefill_steps`'; a chunk stopped at one of its cancel
    points raises `Cancelled`.
    """
    check()
    steps = prefill_steps(seq, tokens, progress=progress, sizer=sizer, stop=stop, alone=alone)
    for _ in steps:
        check()
    if len(seq.tokens) < len(tokens) - 1:  # a gate stopped a chunk
        raise Cancelled
