"""Prompt prefill in chunks sized by throughput and time, with cancel points between chunks.

MLX cannot abort a graph in flight, so the compute between two cancel points
bounds the Stop latency: it must fit the time target. Cancel points come between
chunks, and, where the cache can roll a partial pass back (`layer_gates`), every
few layers inside a chunk; a chunk may then run as long as its layers allow,
within `ChunkSizer.HOLD_S`. Within those bounds, bigger chunks
amortize the fixed cost of a forward pass (reading every weight). A per-model cost
model, learned from every chunk any job prefills, gives the limits:

    t(n, p) = g + a * n + b * n * (p + n / 2) + e * n^2

for a chunk of ``n`` tokens starting at position ``p``: a fixed cost ``g``,
per-token compute ``a``, attention ``b`` over the tokens before each one, and ``e``
what a chunk's attention costs beyond that. Attention that computes a chunk's whole
square of scores and masks it (the CPU's: the fast path's sgemm of every score, and
MLX's fallback) has e = b / 2: each chunk's tokens then cost more the longer it is, and
a prompt is fastest in chunks of ``sqrt(g / e)`` (`PrefillProfile.best`). Attention
that skips the masked half has e = 0: a prompt's attention then costs the same however
it is chunked, and fewer chunks are always faster. The time target caps ``n`` where
``t`` reaches it. A new model's first chunk is small, to measure it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from itertools import combinations

import mlx.core as mx

from ..cache.sequence import CachedSequence
from ..errors import Cancelled
from . import layer_gates
from .device import governor, prefill_pass, release_freed

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
        self.coef: tuple[float, float, float, float] | None = None  # g, a, b, e
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
        g, a, b, e = self.coef
        return g + a * n + b * n * (pos + n / 2) + e * n * n

    def best(self) -> float:
        """The chunk length that prefills a long prompt fastest.

        In chunks of ``n``, a prompt of ``N`` tokens takes ``N / n * g + a * N +
        b * N^2 / 2 + e * N * n``: the least at ``n = sqrt(g / e)``. inf when a chunk's
        attention costs nothing beyond its share of the prompt's (``e = 0``) or there
        is no fixed cost: nothing then makes small chunks pay, and the time target
        alone sizes them. Best effort: where timings are noisy the fit may drop ``g``
        or ``e`` (then inf, and the time target and hold size chunks), and chunks that
        all settle at one length cannot tell the terms apart. inf until two chunk
        lengths of at least half the optimum have been measured.
        """
        if self.coef is None:
            return math.inf
        g, _, _, e = self.coef
        if not (g > 0 and e > 0):
            return math.inf
        best = math.sqrt(g / e)
        # What long chunks cost beyond their share shows only in long chunks: with one
        # measured (short warm-ups, then a prompt's first chunk), ``e`` took the
        # per-token cost that the short ones cannot pin down. The default model's first
        # 512-token prefill then went in chunks of 304, 118 and 89 tokens, the last two
        # at 1.5 and 1.8 ms a token against the first's 0.97. Two lengths of at least
        # half the optimum are asked for.
        if len({n for n, _, _ in self.obs if n >= best / 2}) < 2:
            return math.inf
        return best

    def largest_within(self, seconds: float, pos: int) -> float | None:
        """The longest chunk at ``pos`` predicted to take at most ``seconds``."""
        if self.coef is None:
            return None
        g, a, b, e = self.coef
        room = seconds - g
        if room <= 0:
            return 1.0
        lin, sq = a + b * pos, b / 2 + e
        if sq <= 0:
            return room / lin if lin > 0 else math.inf
        # The positive root of sq n^2 + lin n - room = 0, in the form that does not
        # cancel when sq is tiny (-lin + sqrt(...) loses every digit as sq -> 0).
        return 2 * room / (lin + math.sqrt(lin * lin + 4 * sq * room))

    def _fit(self) -> tuple[float, float, float, float] | None:
        # Least squares on [1, n, n (p + n/2), n^2], coefficients kept non-negative.
        rows = [(1.0, float(n), n * (p + n / 2), float(n * n)) for n, p, _ in self.obs]
        ys = [t for _, _, t in self.obs]
        if len({n for n, _, _ in self.obs}) < 2:
            n, _, t = self.obs[-1]
            return (0.0, t / n, 0.0, 0.0)  # one size seen: all per-token, for now
        # Columns scaled to at most 1 (n^2 reaches 1e6 where 1 is 1): the normal
        # equations then stay well within float precision.
        scale = [max(abs(r[i]) for r in rows) or 1.0 for i in range(4)]
        rows_s = [[x / f for x, f in zip(r, scale)] for r in rows]
        m, fits = len(rows), []
        for keep in _SUBSETS:  # non-negative least squares by trying every subset of terms
            if len(keep) >= m:  # as many terms as times: it would fit their noise exactly
                continue
            coef = _lstsq([[r[i] for i in keep] for r in rows_s], ys)
            if coef is None or any(c < 0 for c in coef):
                continue
            full = [0.0, 0.0, 0.0, 0.0]
            for i, c in zip(keep, coef):
                full[i] = c / scale[i]
            err = sum((sum(f * x for f, x in zip(full, r)) - y) ** 2 for r, y in zip(rows, ys))
            fits.append((err, len(keep), tuple(full)))
        if not fits:
            return None
        # Akaike's final prediction error, err (m + k) / (m - k): a term must earn its
        # place. Three warm-up chunks of 8-22 tokens once fitted no per-token cost and
        # all attention, which then cut a long prompt into chunks of 30. Errors below
        # rounding count as equal (on times that one term explains exactly, the others
        # fit rounding errors: a fixed cost of 1e-17 and an attention term of 2e-22 were
        # seen); among equals the fewest terms, then one with ``e``: chunks all at
        # position 0 cannot tell it from ``b``, and the CPU's attention is a whole square.
        floor = 1e-12 * sum(y * y for y in ys)
        score = lambda err, k: max(err, floor) * (m + k) / (m - k)  # noqa: E731
        return min((score(err, k), k, c[3] == 0, c) for err, k, c in fits)[3]


# Every subset with the per-token term: each token costs compute, and a fit without it
# (fixed cost and attention only, from short chunks) sized the next chunks by noise.
_SUBSETS = [keep for k in (4, 3, 2, 1) for keep in combinations(range(4), k) if 1 in keep]


def _lstsq(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    # Gaussian elimination with partial pivoting; k <= 4. A pivot that is rounding
    # against the largest entry: columns that one another explain (n^2 and n (p + n/2)
    # when every chunk began at 0).
    tiny = 1e-12 * max(abs(ata[i][i]) for i in range(k))
    m = [ata[i] + [aty[i]] for i in range(k)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) <= max(tiny, 1e-300):
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
    # How far past what was measured a chunk may grow: a young fit (a short warm-up
    # prompt) extrapolates, and a chunk without cancel points holds a Stop for all of
    # it. Chunks with them may grow further: past GROWTH x the measured, they get a
    # cancel point after every layer (`every`), so a Stop waits one layer whatever the
    # fit says. At 4x, a long prompt after a short one (a chat's first document) began
    # with a chunk of about 120 tokens on a 1B model, then 230 and 160: 3 chunks where
    # a taught model takes 2, each reading (or widening) every weight once. At 16x the
    # default model's 512-token prompt after a 38-token one goes in one chunk, 1.11-1.22x
    # as fast as in 304 and 207 at 8x in float32 (0.91x in 4 bits, whose chunks all run
    # alike once warm); after two short chat turns 16x and 8x are level (1.005x on that
    # model, 0.99x on a 1B one: `benchmarks/bench_hold.py --growth 8,16`).
    GROWTH = 4
    GATED_GROWTH = 16

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
        # Grow at most GROWTH x per chunk within a prefill, and at most that past the
        # longest chunk ever measured (GATED_GROWTH x where layers have cancel points):
        # a young fit (a short warm-up prompt) extrapolates wildly, and one chunk of a
        # whole long prompt would hold a Stop for seconds.
        grown = self._last or p.largest
        if grown:
            growth = self.GROWTH if points <= 1 else self.GATED_GROWTH
            want = min(want, growth * max(grown, self.first // 4))
        return int(max(self.lo, want))

    def every(self, n: int, pos: int, layers: int) -> int:
        """Layers between cancel points in ``n`` tokens at ``pos``: each stretch fits the target.

        One where the chunk is longer than `GROWTH` x the longest measured: the
        prediction is an extrapolation there.
        """
        t = self.profile.predict(n, pos)
        if not t or t <= 0 or n > self.GROWTH * self.profile.largest:
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
            with gate, prefill_pass(seq.model):
                seq.forward(chunk)
                mx.eval([c.state for c in seq.cache])
        except layer_gates.Aborted:
            seq.drop_partial()
            return
        sizer.observe(len(chunk), clock() - t0, start)
        governor().prefill_chunk()  # other processes took the cores meanwhile: yield them
        mx.clear_cache()
        if len(seq.tokens) >= end:
            release_freed()  # the last chunk: the chunks' blocks, which glibc would keep
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
