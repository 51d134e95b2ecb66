"""Jump-forward for a lone batch row: the tokens its grammar forces need no pass of their own.

A job decoding alone feeds the tokens its grammar allows only one way in front of its
next pass (`decoding.decode.forced_tokens`). A job submitted alone runs as a one-row
batch; these helpers give that row the same: the token sampled last step, then every
token the grammar then forces, written out one by one (the output reads the grammar's
state as it goes) and fed together.
"""

from __future__ import annotations

from .row import Row


def jumps(row: Row) -> bool:
    """Whether a lone row's step may feed the tokens its grammar forces."""
    c = row.setup.constraint
    return c is not None and getattr(c, "jump", False) and not c.stopped


def forced_run(row: Row, v: int) -> tuple[list[int], bool]:
    """``(tokens to feed, whether the row ended)`` after the fed token ``v``.

    A fresh row's ``v`` is its prompt's last token: neither output nor grammar. A row
    that ends on the way (its grammar complete, its budget, a stop string) feeds
    nothing more.
    """
    c, out, rec = row.setup.constraint, row.out, row.setup.recorder
    fed, done = [v], False
    if row.fresh:  # what the grammar forces first rides with the prompt's last token
        row.fresh = False
    else:
        c.consume([v])
        done = out.add(v, False, rec.record(v) if rec else None)
    while not done and (f := c.take_forced()) is not None:
        fed.append(f)
        done = out.add(f, False, rec.forced(f) if rec else None)
    return fed, done
