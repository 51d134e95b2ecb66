"""Several rows' prompts in one forward pass, where the model honours padding.

Rows whose whole remaining prompts fit one chunk prefill together, right-padded
to the longest, as mlx-lm's batched prompt processing does: one pass over the
weights instead of one per row. A model with layers that read their padding
(`cache.padding`) prefills them one at a time instead, and its rows are told why.
"""

from __future__ import annotations

import mlx.core as mx

from ..cache.caches import extract, finalize, merge, prepare_padding
from ..cache.sequence import count_pass
from ..decoding.device import governor, prefill_8_bit
from ..events import Notice, PrefillProgress
from .row import Row


def may_prefill_together(group: list[Row], main, tables) -> bool:
    """Whether ``group`` may share one padded pass on ``main`` (checked once per model).

    When not, each row hears why, once. With 8-bit prefill inputs (asked for, not a
    defect of the model: nothing said) rows prefill one at a time: a padded pass runs
    mlx-lm's layers, a row alone the fused ones, whose float sums in another order round
    to other 8-bit inputs at a rounding step's edge, and a row's text would follow its
    neighbours.
    """
    if prefill_8_bit(main.model):
        return False
    why = group[0].state.padding_problem(main, tables)
    if why is None:
        return True
    for r in group:
        if not r.told_padding:
            r.told_padding = True
            r.job.emit(Notice(f"{main.name} prefills prompts one at a time: {why}"))
    return False


def prefill_together(main, group: list[Row], tables) -> None:
    """Prefill every row of ``group`` in one right-padded pass; each row then is ready."""
    tokens = [r.setup.prompt[len(r.seq.tokens) : -1] for r in group]
    longest = max(len(t) for t in tokens)
    pad = [longest - len(t) for t in tokens]
    caches = merge([r.seq.cache for r in group])
    for t in tables:
        t.grow(max(len(r.seq.tokens) for r in group) + longest)
    if max(pad):  # padding after each prompt: masked, then moved in front or dropped
        prepare_padding(caches, [len(t) for t in tokens], pad)
    governor().prefill_chunk()  # starts the meter's window
    count_pass()
    # Padding repeats each row's last token: masked all the same, but a real token. Id 0
    # may have a zero embedding (a special token), and a layer that normalizes by its
    # input's size (Gemma 3n's) turns that into NaN, which masked attention still
    # multiplies (0 * NaN).
    fed = [t + [t[-1]] * p for t, p in zip(tokens, pad)]
    main.model(mx.array(fed), cache=caches)
    if max(pad):
        finalize(caches)
    mx.eval([c.state for c in caches])
    governor().prefill_chunk()  # others took the cores meanwhile: yield them
    for i, (r, t) in enumerate(zip(group, tokens)):
        r.seq.cache = extract(caches, i)
        r.seq.record(t)
        r.job.emit(PrefillProgress(len(r.seq.tokens), len(r.setup.prompt), "main"))
        r.out.stats.prefill_chunk = max(r.out.stats.prefill_chunk, len(t))
        r.prefilled()
    mx.clear_cache()
