"""A batched decode step's next tokens: each row's own processors and sampler, drawn together.

Each row keeps what it would do alone: its logits processors (repetition penalty and
the like) on its own history, its grammar's mask, its token recorder, its sampler and
its seed. What rows share is taken together where the fast path's kernels can: the
greedy rows' picks, the sampled rows' normalizer, and each filter and the draw of the
rows with the same sampling settings (`cpu_sampling.draw_rows`: a kernel call each,
the rows over the threads, where row after row took several calls per row). Without
the kernels (a GPU, or no extension) rows go one after another as before; either way
every row draws the token it draws alone.
"""

from __future__ import annotations

import mlx.core as mx

from ..models import cpu_sampling
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
        return cpu_sampling.argmax(logits)
    scores = [_processed(row, cur[i : i + 1], logits[i : i + 1]) for i, row in enumerate(rows)]
    sampled = [i for i, row in enumerate(rows) if not row.setup.greedy]
    drawn = _draw_together(rows, sampled, scores) if len(sampled) > 1 else None
    at = {i: j for j, i in enumerate(sampled)}
    parts = []
    for i, row in enumerate(rows):
        if row.setup.greedy:
            parts.append(cpu_sampling.argmax(scores[i]))
        elif drawn is not None:
            parts.append(drawn[at[i] : at[i] + 1])
        else:
            # Keyed by position, whatever the other rows do: the same seed gives the
            # same text as the job alone.
            lp = scores[i] - cpu_sampling.logsumexp(scores[i])
            parts.append(row.setup.sample(lp, len(row.seq.tokens)))
    return mx.concatenate(parts)


def _processed(row: Row, fed: mx.array, lg: mx.array) -> mx.array:
    """One row's scores after its processors and its grammar, stashed for its recorder."""
    raw = lg
    if row.setup.recorder is not None and row.setup.processors:
        raw = lg + 0  # mlx-lm's processors assign into their input
    if row.setup.processors:
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
    if not all(hasattr(s, "key") for s in samplers):
        return None
    together = mx.concatenate([scores[i] for i in sampled])
    lp = together - cpu_sampling.logsumexp(together)  # lazy: unused where None comes back
    keys = [lambda s=s, i=i: s.key(len(rows[i].seq.tokens)) for s, i in zip(samplers, sampled)]
    return cpu_sampling.draw_rows(lp, [s.sampler for s in samplers], keys)
