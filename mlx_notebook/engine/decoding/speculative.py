"""Speculative decoding: draft k, verify in one main pass, accept the agreeing prefix.

Acceptance follows mlx-lm: a draft token is accepted while the main model's
sampled token at that position equals it, then the main model's own token is
taken. With greedy sampling the output is exactly the main model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from ..cache.sequence import CachedSequence
from . import sampling
from .decode import KeyedSampler, Processor, TokenStream, forced_tokens, make_step
from .device import governor
from .drafts import DraftSource
from .prefill import CancelCheck, Progress


@dataclass
class DraftCounters:
    """Running totals for the stats line, overall and by draft position."""

    proposed: int = 0
    accepted: int = 0
    rounds: int = 0
    proposed_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)

    def record(self, proposed: int, accepted: int) -> None:
        """One verify round: ``proposed`` drafts, the first ``accepted`` of them kept."""
        if not proposed:
            return
        self.proposed += proposed
        self.accepted += accepted
        self.rounds += 1
        grow = proposed - len(self.proposed_at)
        if grow > 0:
            self.proposed_at += [0] * grow
            self.accepted_at += [0] * grow
        for i in range(proposed):
            self.proposed_at[i] += 1
        for i in range(accepted):
            self.accepted_at[i] += 1


def speculative_tokens(
    seq: CachedSequence,
    history: list[int],
    source: DraftSource,
    *,
    num_draft: int,
    sampler: KeyedSampler,
    processors: list[Processor] | None,
    max_tokens: int,
    check: CancelCheck,
    stream,
    counters: DraftCounters,
    draft_progress: Progress = lambda d, t: None,
    greedy: bool = False,
    constraint=None,
    recorder=None,
) -> TokenStream:
    """Yield ``(token, from_draft)`` using ``source`` for drafts.

    A source that needs a prefill (a draft model) gets it after the first token,
    which the main model produces alone: the draft's prefill then does not delay
    the first token (it made TTFT about twice normal decoding's).

    Cancel points sit where both caches equal their recorded tokens: at the top
    of each round, i.e. before drafting and after the previous round's rewind.

    Args:
        seq: Main model; must hold ``history[:-1]``.
        history: Prompt tokens. The generator appends generated tokens to it.
        source: Where drafts come from.
        num_draft: Most draft tokens per round.
        sampler: ``sample(logprobs, position)`` (`decode.KeyedSampler`).
        processors: Logits processors, or None.
        max_tokens: Most tokens to yield.
        check: Cancel point; raises `Cancelled`.
        stream: The MLX stream of the worker thread.
        counters: Updated with proposed/accepted draft counts.
        draft_progress: ``(done, total)`` of the source's prefill.
        greedy: The sampler is greedy (argmax); skip normalizing the logits.
        constraint: The job's grammar, or None: each verified position gets its
            mask, and drafts are accepted only as far as the grammar allows.
        recorder: Per-token records, or None: an accepted draft's record names
            its source (``source.label``).
    """
    n = 0
    gov = governor()
    # Rounds with no draft run as plain decoding does, each step queued before the last
    # one's token is read; a draft found then costs the queued step (the cache rewinds).
    pipelined = seq.rewinds_anywhere and not processors and constraint is None and recorder is None
    with mx.stream(stream):
        forced = forced_tokens(seq, history, constraint, max_tokens, recorder) if constraint else ()
        for item in forced:
            n += 1
            yield item  # forced by the grammar: fed in front of the next pass
        if source.needs_prefill and n < max_tokens:
            check()
            first = _verify(seq, history, [], sampler, processors, greedy, constraint, recorder)[0]
            if recorder is not None:
                recorder.emit(recorder.record(first))
            if constraint is not None:
                constraint.consume([first])
            history.append(first)
            n += 1
            yield first, False
            if n < max_tokens:
                source.prefill(history, check, draft_progress)
        while n < max_tokens:
            if constraint is not None and n:
                for item in forced_tokens(seq, history, constraint, max_tokens - n, recorder):
                    n += 1
                    yield item
                if n >= max_tokens:
                    return
            check()
            # Leave room for the main model's own token after the drafts.
            drafts = source.propose(history, min(num_draft, max_tokens - n - 1))
            if not drafts and pipelined:  # nothing to verify: plain steps, pipelined
                got = []
                drafts = yield from _plain_steps(
                    seq, history, source, num_draft, sampler, greedy, max_tokens - n, check, got
                )
                n += len(got)
                if n >= max_tokens:
                    return
            if drafts:  # a cache that cannot trim comes back here instead
                seq.checkpoint()
            sampled = _verify(
                seq, history, drafts, sampler, processors, greedy, constraint, recorder
            )
            accepted = 0
            # A constrained pass samples only the positions the grammar reached.
            most = min(len(drafts), len(sampled) - 1)
            while accepted < most and sampled[accepted] == drafts[accepted]:
                accepted += 1
            counters.record(len(drafts), accepted)
            gov.step()
            # Keep history + accepted drafts; the main token is fed next round. A
            # window or recurrent state is restored to the checkpoint instead, and the
            # accepted tokens are fed again in front of the next round's pass.
            seq.trim_to(len(history) + accepted)
            for i in range(accepted + 1):
                if recorder is not None:
                    kind = source.label if i < accepted else "model"
                    recorder.emit(recorder.record(sampled[i], kind))
                if constraint is not None:  # one at a time: the consumer may end here
                    constraint.consume([sampled[i]])
                history.append(sampled[i])
                n += 1
                yield sampled[i], i < accepted
            if recorder is not None:
                recorder.clear()  # the rows past the accepted ones


def _verify(
    seq: CachedSequence,
    history: list[int],
    drafts: list[int],
    sampler: KeyedSampler,
    processors: list[Processor] | None,
    greedy: bool = False,
    constraint=None,
    recorder=None,
) -> list[int]:
    """One main-model pass over the last token and the drafts; sample every row.

    With a constraint, only the rows the grammar reaches are sampled (each under
    its own mask); the list is then shorter, ending where acceptance must end.
    """
    logits = raw = seq.forward([history[-1], *drafts])[0]
    if processors:
        # Row i is sampled after history + drafts[:i], as sequential decoding would.
        full = mx.array([*history, *drafts], dtype=mx.uint32)
        rows = []
        for i in range(logits.shape[0]):
            row = logits[i : i + 1]
            for p in processors:
                row = p(full[: len(history) + i], row)
            rows.append(row)
        logits = mx.concatenate(rows, axis=0)
    masks = None
    if constraint is not None and not constraint.stopped:
        masks = constraint.walk(drafts)
        allow = mx.array(np.stack(masks))
        logits = mx.where(allow, logits[: len(masks)], mx.array(-float("inf"), logits.dtype))
    if recorder is not None:
        recorder.clear()
        for i in range(logits.shape[0]):
            forced = masks is not None and int(masks[i].sum()) == 1
            recorder.stash(logits[i : i + 1], None if logits is raw else raw[i : i + 1], forced)
    if greedy:  # normalizing cannot change an argmax
        return sampling.argmax(logits).tolist()
    logprobs = logits - sampling.logsumexp(logits)
    # Row i at its own position, drawn as sequential decoding would draw it: an
    # accepted draft is then the very token normal decoding samples there.
    first = len(history) - 1
    rows = [sampler(logprobs[i : i + 1], first + i) for i in range(logprobs.shape[0])]
    return mx.concatenate(rows).tolist()


def _plain_steps(
    seq: CachedSequence,
    history: list[int],
    source: DraftSource,
    num_draft: int,
    sampler: KeyedSampler,
    greedy: bool,
    limit: int,
    check: CancelCheck,
    got: list[int],
):
    """Decode one token at a time while ``source`` proposes nothing, pipelined.

    Each step is queued on the previous step's lazy token before that token is read,
    so MLX computes it while Python reads, yields and asks the source: what plain
    decoding does, and what a verify pass of no drafts cannot. Cancel points see the
    cache holding ``history`` exactly (the queued step's own token is not fed yet).

    Yields:
        ``(token, False)`` for each token, appended to ``history`` and ``got``.

    Returns:
        The drafts the source proposed after the last token (the cache holds
        ``history[:-1]`` again, as a verify round expects), or [] at ``limit``.
    """
    gov = governor()
    step = make_step(seq, sampler, None, history, greedy)
    y = step(mx.array(history[-1:], dtype=mx.uint32))
    seq.record(history[-1:])
    mx.async_eval(y)
    while True:
        more = len(got) + 1 < limit
        nxt = None
        if more:  # queued on the lazy token: computed while this one is read
            nxt = step(y)
            mx.async_eval(nxt)
        t = y.item()
        if more:
            seq.record([t])  # fed to the cache as the queued step's input
        history.append(t)
        got.append(t)
        gov.step()
        yield t, False
        if not more:
            # The last token is not fed: the cache holds history[:-1], as after a round.
            return []
        check()
        drafts = source.propose(history, min(num_draft, limit - len(got) - 1))
        if drafts:  # the queued step is dropped: back to history[:-1] for the verify pass
            seq.trim_to(len(history) - 1)
            return drafts
        y = nxt
