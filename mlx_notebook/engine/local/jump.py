"""Jump-forward for batch rows: the tokens a grammar forces need no pass of their own.

A job decoding alone feeds the tokens its grammar allows only one way in front of its
next pass (`decoding.decode.forced_tokens`). Batch rows get the same: at a step where
a row's grammar forces tokens, the row feeds the token it sampled last step and then
every token its grammar forces (written out one by one: the output reads the grammar's
state as it goes), and the other rows feed their one token. The rows' inputs are
right-padded to the longest in one pass, as rows prefilled together are
(`batch_prefill`), and each row samples from the logits at its own last token. Where
that would not be exact (see `Batch._jumps_exactly`), rows keep one token a step.
"""

from __future__ import annotations

import mlx.core as mx

from ..cache.caches import finalize, prepare_padding
from ..cache.sequence import count_pass
from ..decoding.device import governor
from .batch_sampling import next_tokens
from .row import Row


def jumps(row: Row) -> bool:
    """Whether a row's step may feed the tokens its grammar forces."""
    c = row.setup.constraint
    return c is not None and getattr(c, "jump", False) and not c.stopped


def feed(row: Row, v: int) -> tuple[list[int], bool]:
    """``(tokens to feed, whether the row ended)`` after the fed token ``v``.

    A fresh row's ``v`` is its prompt's last token: neither output nor grammar. A row
    that ends on the way (its grammar complete, its budget, a stop string) feeds
    nothing more. A row without jump-forward feeds ``v`` alone.
    """
    c, out, rec = row.setup.constraint, row.out, row.setup.recorder
    jump = jumps(row)
    fed, done = [v], False
    if row.fresh:  # what the grammar forces first rides with the prompt's last token
        row.fresh = False
    else:
        if c is not None:
            c.consume([v])
        done = out.add(v, False, rec.record(v) if rec else None)
        if not done and not jump:
            done = row.forced_end()
    while jump and not done and (f := c.take_forced()) is not None:
        fed.append(f)
        done = out.add(f, False, rec.forced(f) if rec else None)
    return fed, done


def step(batch, rows: list[Row], cur: mx.array) -> None:
    """One pass of ``batch`` in which rows feed what their grammars force.

    Args:
        batch: The `Batch` (its model, cache, RoPE tables and pending tokens).
        rows: Its decoding rows, in the cache's order.
        cur: The tokens this step feeds, one per row (sampled last step).
    """
    feeds, ended = {}, []
    for row, v in zip(rows, cur.tolist()):
        fed, done = feed(row, v)
        if done:
            ended.append(row)
        else:
            feeds[id(row)] = fed
    for row in ended:  # nothing left to sample: it leaves before the pass
        if row in batch.rows:  # (a failed leave ends every row of the batch)
            batch._end(row, None)
    rows = batch.decoding  # those left, in the cache's order
    if not rows:
        batch._pending = None
        return
    fed = [feeds[id(r)] for r in rows]
    lengths = [len(f) for f in fed]
    pad = [max(lengths) - n for n in lengths]
    for r in rows:
        st = r.out.stats
        st.batch_rows = max(st.batch_rows, len(rows))
        st.decode_steps += 1
        st.step_rows += len(rows)
    for t in batch._tables:
        t.grow(max(len(r.seq.tokens) for r in rows) + max(lengths))
    if max(pad):  # padding after the shorter rows: masked, then moved in front
        prepare_padding(batch._cache, lengths, pad)
    count_pass()
    inp = mx.array([f + [f[-1]] * p for f, p in zip(fed, pad)], dtype=mx.uint32)
    # A token a row (nothing forced this step): the fast path's RoPE rows, taken once,
    # as in a plain batched step.
    pinned = batch._tables if len(rows) > 1 and max(lengths) == 1 else []
    for t in pinned:
        t.pin([len(r.seq.tokens) for r in rows])
    try:
        logits = batch.main.model(inp, cache=batch._cache)
    finally:
        for t in pinned:
            t.pin(None)
    if max(pad):
        finalize(batch._cache)
    logits = logits[mx.arange(len(rows)), mx.array(lengths) - 1]  # each row's last token
    for r, f in zip(rows, fed):
        if r.setup.processors and len(f) > 1:  # they see every token fed
            r.context = mx.concatenate([r.context, mx.array(f[:-1], dtype=mx.uint32)])
        # A seeded draw is keyed by the position of the last token fed, as in a step.
        r.seq.record(f[:-1])
    last = mx.array([f[-1] for f in fed], dtype=mx.uint32)
    batch._pending = next_tokens(rows, last, logits)
    mx.async_eval(batch._pending)
    governor().step()
    for r, f in zip(rows, fed):
        r.seq.record(f[-1:])
