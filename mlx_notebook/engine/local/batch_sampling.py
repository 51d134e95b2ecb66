"""A batched decode step's next tokens: each row's own processors and sampler, drawn together.

Each row keeps what it would do alone: its logits processors (repetition penalty and
the like) on its own history, its grammar's mask, its token recorder, its sampler and
its seed. What rows share is taken together where the fast path's kernels can: the
greedy rows' picks, the sampled rows' normalizer, and each filter and the draw of the
rows with the same sampling settings (`sampling.draw_rows`: a kernel call each,
the rows over the threads, where row after row took several calls per row). Without
the kernels (a GPU, or no extension) rows go one after another as before; either way
every row draws the token it draws alone.
"""

from __future__ import annotations

import mlx.core as mx

from ..decoding import sampling
from .row import Row


def next_tokens(rows: list[Row], cur: mx.array, logits: mx.array) -> mx.array:
    """The next token of every row: uint32 ``[rows]``, lazy.

    Args:
        rows: The step's rows, in the batch's order (a grammar already fed this step's
            tokens: `Batch._advance_constraints`).
        cur: The tokens this step fed, ``[rows]``.
        logits: The step's last-position logits, ``[rows, vocabulary]``.
    """
    plain = not any(r.setup.processors or r.setup.constraint or r.setup.recorder for r in rows)
    if plain and all(r.setup.greedy for r in rows):
        return sampling.argmax(logits)
    penalized = _penalties_together(rows, cur, logits)
    scores = [
        _processed(row, cur[i : i + 1], logits[i : i + 1], penalized.get(i))
        for i, row in enumerate(rows)
    ]
    sampled = [i for i, row in enumerate(rows) if not row.setup.greedy]
    drawn = _draw_together(rows, sampled, scores) if len(sampled) > 1 else None
    at = {i: j for j, i in enumerate(sampled)}
    parts = []
    for i, row in enumerate(rows):
        if row.setup.greedy:
            parts.append(sampling.argmax(scores[i]))
        elif drawn is not None:
            parts.append(drawn[at[i] : at[i] + 1])
        else:
            # Keyed by position, whatever the other rows do: the same seed gives the
            # same text as the job alone.
            lp = scores[i] - sampling.logsumexp(scores[i])
            parts.append(row.setup.sample(lp, len(row.seq.tokens)))
    return mx.concatenate(parts)


def _processed(row: Row, fed: mx.array, lg: mx.array, penalized: mx.array | None) -> mx.array:
    """One row's scores after its processors and its grammar, stashed for its recorder.

    ``penalized``: its processors' result, computed with other rows' (or None).
    """
    raw = lg
    if penalized is not None:
        lg = penalized
    elif row.setup.processors:
        if row.setup.recorder is not None:
            raw = lg + 0  # mlx-lm's processors assign into their input
        row.context = mx.concatenate([row.context, fed])
        for p in row.setup.processors:
            lg = p(row.context, lg)
    if row.setup.constraint is not None:  # after the processors, as alone
        lg = row.setup.constraint.mask(lg)
    if row.setup.recorder is not None:
        c = row.setup.constraint
        forced = c is not None and c.last_forced
        row.setup.recorder.stash(lg, None if lg is raw else raw, forced)
    return lg


def _draw_together(rows: list[Row], sampled: list[int], scores: list[mx.array]):
    """The sampled rows' tokens from one normalizer call and `draw_rows`, or None."""
    samplers = [rows[i].setup.sample for i in sampled]
    together = mx.concatenate([scores[i] for i in sampled])
    lp = together - sampling.logsumexp(together)  # lazy: unused where None comes back
    keys = [lambda s=s, i=i: s.key(len(rows[i].seq.tokens)) for s, i in zip(samplers, sampled)]
    return sampling.draw_rows(lp, [s.sampler for s in samplers], keys)


def _penalties_together(rows: list[Row], cur: mx.array, logits: mx.array) -> dict[int, mx.array]:
    """The rows whose only processor is a repetition penalty, penalized a group at a time.

    mlx-lm's penalty (`output.repetition_processors` marks it) gathers a row's logits at its last
    ``context`` tokens, scales them (times the penalty below zero, divided by it above)
    and writes them back: per row a gather, a select and a scatter. Rows with the same
    penalty and context length take the three together, on a ``[rows, context]`` index
    (a row with fewer tokens repeats one: the same value is written twice). The same
    operations on the same values: each row's scores are those of its own processor.

    Returns:
        Row index -> its penalized scores ``[1, vocabulary]``, for the grouped rows (their
        contexts advanced); the others are left to `_processed`.
    """
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        procs = row.setup.processors
        tag = getattr(procs[0], "penalty", None) if procs and len(procs) == 1 else None
        if tag is not None and row.context is not None:
            groups.setdefault(tag, []).append(i)
    out: dict[int, mx.array] = {}
    for (penalty, size), members in groups.items():
        if len(members) < 2:
            continue
        index = []
        for i in members:
            row = rows[i]
            row.context = mx.concatenate([row.context, cur[i : i + 1]])
            last = row.context[-size:]
            short = size - last.size
            index.append(
                last if short == 0 else mx.concatenate([last, mx.repeat(last[-1:], short)])
            )
        index = mx.stack(index).astype(mx.int32)
        lg = logits[mx.array(members)]
        picked = mx.take_along_axis(lg, index, axis=-1)
        picked = mx.where(picked < 0, picked * penalty, picked / penalty)
        lg = mx.put_along_axis(lg, index, picked, axis=-1)
        for j, i in enumerate(members):
            out[i] = lg[j : j + 1]
    return out
