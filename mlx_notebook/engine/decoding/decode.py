"""Token generators: normal decoding with async-eval pipelining and cancel points.

A token generator yields ``(token_id, from_draft)``. It owns the committed
history, and keeps its `CachedSequence` equal to what the cache holds at every
yield and every cancel point, so the consumer may stop at any yield.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import mlx.core as mx

from ..cache.sequence import CachedSequence
from . import sampling
from .device import governor
from .prefill import CancelCheck

Sampler = Callable[[mx.array], mx.array]
Processor = Callable[[mx.array, mx.array], mx.array]
TokenStream = Iterator[tuple[int, bool]]


class KeyedSampler:
    """``sample(logprobs, position)``: with a seed, each position draws with its own key.

    ``position`` is the index of the token just fed. The key depends only on the
    seed and the position, so a job draws the same token alone, as a batch row,
    or when a verify pass samples several positions at once: seeded sampling
    gives the same text on every path, and speculation keeps it. Without a seed,
    draws come from MLX's global generator.

    Args:
        sampler: From `sampling.make_sampler`.
        seed: The job's seed, or None.
    """

    def __init__(self, sampler, seed: int | None) -> None:
        self.sampler, self.seed = sampler, seed

    def key(self, position: int) -> None:
        """Set the random key for ``position`` (nothing without a seed)."""
        if self.seed is not None:
            mx.random.seed((self.seed * 1_000_003 + position) % 2**64)

    def __call__(self, logprobs: mx.array, position: int) -> mx.array:
        """The token ``sampler`` draws from ``logprobs`` with ``position``'s key."""
        self.key(position)
        return self.sampler(logprobs)


def make_step(
    seq: CachedSequence,
    sampler: KeyedSampler,
    processors: list[Processor] | None,
    history: list[int],
    greedy: bool = False,
    constraint=None,
    recorder=None,
) -> Callable[[mx.array], mx.array]:
    """Build ``step(input_ids) -> sampled`` for the last position, as mlx-lm does.

    Logits processors see the full token context, prompt included. Greedy
    sampling takes the argmax of the raw logits: normalizing them first (a
    log-sum-exp over the whole vocabulary) cannot change it. A ``recorder``
    is handed the logits each token is drawn from.
    """
    ctx = mx.array(history[:-1], dtype=mx.uint32) if processors else None
    position = len(history) - 1  # of the first token fed: the prompt's last

    def step(ids: mx.array) -> mx.array:
        nonlocal ctx, position
        fed = list(seq.pending)  # forced tokens ride in front of ``ids``
        logits = raw = seq.forward(ids)[:, -1, :]
        if recorder is not None and processors:
            raw = logits + 0  # mlx-lm's processors assign into their input
        position += len(fed) + ids.size
        if processors:
            if fed:
                ctx = mx.concatenate([ctx, mx.array(fed, dtype=mx.uint32)])
            ctx = mx.concatenate([ctx, ids])
            for p in processors:
                logits = p(ctx, logits)
        if constraint is not None:  # after the processors, before sampling
            logits = constraint.mask(logits)
        if recorder is not None:
            forced = constraint is not None and constraint.last_forced
            recorder.stash(logits, None if logits is raw else raw, forced)
        if greedy:
            y = sampling.argmax(logits)
        else:
            y = sampler(logits - sampling.logsumexp(logits), position - 1)
        if recorder is not None:
            recorder.bind(y)  # its statistics evaluate with it: no extra wait
        return y

    return step


def normal_tokens(
    seq: CachedSequence,
    history: list[int],
    *,
    sampler: KeyedSampler,
    processors: list[Processor] | None,
    max_tokens: int,
    check: CancelCheck,
    stream,
    greedy: bool = False,
    constraint=None,
    recorder=None,
) -> TokenStream:
    """Yield tokens one at a time, evaluating step n+1 while n is consumed.

    With a ``constraint`` each step's mask depends on the token before it, so
    steps run one after the other instead.

    Args:
        seq: Main model; must hold ``history[:-1]``.
        history: Prompt tokens. The generator appends generated tokens to it.
        sampler: ``sample(logprobs, position)`` (`KeyedSampler`).
        processors: From `make_logits_processors`, or None.
        max_tokens: Most tokens to yield.
        check: Cancel point; raises `Cancelled`.
        stream: The MLX stream of the worker thread.
        greedy: The sampler is greedy (argmax); skip normalizing the logits.
        constraint: The job's grammar (`constraint.Constraint`), or None.
        recorder: Per-token records (`recorder.Recorder`), or None: each
            token's record is queued on it just before the token is yielded.
    """
    step = make_step(seq, sampler, processors, history, greedy, constraint, recorder)
    if constraint is not None:
        yield from _constrained(seq, history, step, max_tokens, check, stream, constraint, recorder)
        return
    gov = governor()
    with mx.stream(stream):
        check()
        y = step(mx.array(history[-1:], dtype=mx.uint32))
        seq.record(history[-1:])
        mx.async_eval(y)
        n = 0
        while True:
            check()  # before building the next step, so a cancel wastes none
            nxt = None
            if n + 1 < max_tokens:
                nxt = step(y)
                mx.async_eval(nxt)
            tok = y.item()
            gov.step()  # step n is done: its time decides the thread count
            if nxt is not None:
                seq.record([tok])
            history.append(tok)
            if recorder is not None:
                recorder.emit(recorder.record(tok))
            yield tok, False
            n += 1
            if nxt is None:
                return
            if n % 256 == 0:
                mx.clear_cache()
            y = nxt


def forced_tokens(
    seq: CachedSequence, history: list[int], constraint, limit: int, recorder=None
) -> TokenStream:
    """Yield (at most ``limit``) tokens the grammar allows only one way, unsampled.

    Each is appended to ``history`` and deferred on ``seq`` (which keeps holding
    ``history[:-1]``), so the next pass feeds them all at once instead of one
    pass each. One at a time: the consumer may end the job at any of them.
    """
    for _ in range(limit):
        tok = constraint.take_forced()
        if tok is None:
            return
        seq.defer(history[-1:])
        history.append(tok)
        if recorder is not None:
            recorder.emit(recorder.forced(tok))
        yield tok, False


def _constrained(
    seq, history, step, max_tokens, check, stream, constraint, recorder
) -> TokenStream:
    """Normal decoding, one step at a time: each mask needs the token before it.

    Forced tokens cost no step of their own: they ride in front of the next one.
    """
    gov = governor()
    n = 0
    with mx.stream(stream):
        while True:
            for item in forced_tokens(seq, history, constraint, max_tokens - n, recorder):
                n += 1
                yield item
            if n >= max_tokens:
                return
            check()
            tok = step(mx.array(history[-1:], dtype=mx.uint32)).item()
            gov.step()
            seq.record(history[-1:])
            if recorder is not None:  # before consuming: the mask it was drawn under
                recorder.emit(recorder.record(tok))
            constraint.consume([tok])
            history.append(tok)
            n += 1
            yield tok, False
            if n >= max_tokens:
                return
            if n % 256 == 0:
                mx.clear_cache()
