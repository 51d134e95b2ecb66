"""Token generators: normal decoding with async-eval pipelining and cancel points.

A token generator yields ``(token_id, from_draft)``. It owns the committed
history, and keeps its `CachedSequence` equal to what the cache holds at every
yield and every cancel point, so the consumer may stop at any yield.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import mlx.core as mx

from .prefill import CancelCheck
from .sequence import CachedSequence
from .threads import governor

Sampler = Callable[[mx.array], mx.array]
# ``sample(logprobs, position)``: position is the index of the token just fed
# (`output.keyed_sampler`), so a seeded draw is the same on every path.
KeyedSampler = Callable[[mx.array, int], mx.array]
Processor = Callable[[mx.array, mx.array], mx.array]
TokenStream = Iterator[tuple[int, bool]]


def make_step(
    seq: CachedSequence,
    sampler: KeyedSampler,
    processors: list[Processor] | None,
    history: list[int],
    greedy: bool = False,
    constraint=None,
) -> Callable[[mx.array], mx.array]:
    """Build ``step(input_ids) -> sampled`` for the last position, as mlx-lm does.

    Logits processors see the full token context, prompt included. Greedy
    sampling takes the argmax of the raw logits: normalizing them first (a
    log-sum-exp over the whole vocabulary) cannot change it.
    """
    ctx = mx.array(history[:-1], dtype=mx.uint32) if processors else None
    position = len(history) - 1  # of the first token fed: the prompt's last

    def step(ids: mx.array) -> mx.array:
        nonlocal ctx, position
        logits = seq.forward(ids)[:, -1, :]
        position += 1
        if processors:
            ctx = mx.concatenate([ctx, ids])
            for p in processors:
                logits = p(ctx, logits)
        if constraint is not None:  # after the processors, before sampling
            logits = constraint.mask(logits)
        if greedy:
            return mx.argmax(logits, axis=-1)
        return sampler(logits - mx.logsumexp(logits, keepdims=True), position - 1)

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
) -> TokenStream:
    """Yield tokens one at a time, evaluating step n+1 while n is consumed.

    With a ``constraint`` each step's mask depends on the token before it, so
    steps run one after the other instead.

    Args:
        seq: Main model; must hold ``history[:-1]``.
        history: Prompt tokens. The generator appends generated tokens to it.
        sampler: ``sample(logprobs, position)`` (`output.keyed_sampler`).
        processors: From `make_logits_processors`, or None.
        max_tokens: Most tokens to yield.
        check: Cancel point; raises `Cancelled`.
        stream: The MLX stream of the worker thread.
        greedy: The sampler is greedy (argmax); skip normalizing the logits.
        constraint: The job's grammar (`constraint.Constraint`), or None.
    """
    step = make_step(seq, sampler, processors, history, greedy, constraint)
    if constraint is not None:
        yield from _constrained(seq, history, step, max_tokens, check, stream, constraint)
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
            yield tok, False
            n += 1
            if nxt is None:
                return
            if n % 256 == 0:
                mx.clear_cache()
            y = nxt


def _constrained(seq, history, step, max_tokens, check, stream, constraint) -> TokenStream:
    """Normal decoding, one step at a time: each mask needs the token before it."""
    gov = governor()
    with mx.stream(stream):
        ids = history[-1:]
        for n in range(max_tokens):
            check()
            tok = step(mx.array(ids, dtype=mx.uint32)).item()
            gov.step()
            seq.record(ids)
            constraint.consume([tok])
            history.append(tok)
            yield tok, False
            ids = [tok]
            if n % 256 == 255:
                mx.clear_cache()
