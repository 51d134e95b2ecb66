"""Per-token records: a token's log-probability, rank, entropy and top alternatives.

`TokenTable` is a list of `TokenRecord` with the summaries people ask for
(perplexity, mean log-probability) and ``to_frame()``. Log-probabilities are
natural logs of the model's distribution after its logits processors, as
mlx-lm's ``generate_step`` reports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx


@dataclass(frozen=True)
class TokenRecord:
    """One token and what the model thought of it.

    Attributes:
        index: Position among the scored (or generated) tokens, from 0.
        token_id: The token id.
        text: The token's text (a byte-fallback piece may show as ``�``).
        logprob: Natural log-probability of the token.
        rank: 1 for the most likely token, 2 for the runner-up...
        entropy: Entropy of the distribution at this position, in nats.
        top: The most likely tokens there, ``(text, id, logprob)``, most likely first.
        source: Where the token came from: ``text`` (scored), ``model``,
            ``prompt-lookup``, ``suffix`` or ``draft-model`` (an accepted draft),
            ``grammar`` (the only token a schema allowed there) or ``chosen``
            (a branch's first token, picked by the user: its record holds the
            model's own distribution there).
        raw_logprob: Under the raw model distribution, before logits processors
            and a schema's mask (generated tokens; None where no pass ran).
    """

    index: int
    token_id: int
    text: str
    logprob: float
    rank: int
    entropy: float
    top: tuple[tuple[str, int, float], ...] = ()
    source: str = "text"
    raw_logprob: float | None = None

    @property
    def prob(self) -> float:
        """The token's probability."""
        return math.exp(self.logprob)


class TokenTable(list):
    """A list of `TokenRecord` with summaries and a DataFrame view.

    In a notebook with the extension loaded it displays as the token inspector.
    """

    def __repr__(self) -> str:
        return (
            f"<TokenTable: {len(self)} tokens, mean logprob {self.mean_logprob:.3f}, "
            f"perplexity {self.perplexity:.2f}; .to_frame() for every token>"
        )

    @property
    def mean_logprob(self) -> float:
        """Mean log-probability per token (nan when empty)."""
        return sum(r.logprob for r in self) / len(self) if self else float("nan")

    @property
    def perplexity(self) -> float:
        """``exp(-mean_logprob)``: 1 is certainty; higher is more surprised."""
        return math.exp(-self.mean_logprob) if self else float("nan")

    def to_frame(self):
        """A pandas DataFrame: one row per token; ``top`` as ``text (prob)`` strings."""
        import pandas as pd

        rows = [
            {
                "token": r.text,
                "id": r.token_id,
                "logprob": r.logprob,
                "prob": r.prob,
                "rank": r.rank,
                "entropy": r.entropy,
                "source": r.source,
                "top": [f"{t!r} ({math.exp(lp):.3f})" for t, _, lp in r.top],
            }
            for r in self
        ]
        columns = ["token", "id", "logprob", "prob", "rank", "entropy", "source", "top"]
        return pd.DataFrame(rows, columns=columns)


def position_stats(logits: mx.array, targets: mx.array, top_k: int):
    """Per row of ``logits`` [L, V]: the target's logprob and rank, the entropy, the top-k.

    Returns:
        Lists ``(logprob, rank, entropy, top_ids, top_logprobs)``, one item per row.
    """
    return listed_stats(stats_arrays(logits, targets, top_k), logits.shape[0], top_k)


def stats_arrays(logits: mx.array, targets: mx.array, top_k: int) -> list[mx.array]:
    """`position_stats` as lazy arrays: evaluate them with the step that samples ``targets``."""
    logits = logits.astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    chosen = mx.take_along_axis(lp, targets[:, None], axis=-1)
    rank = mx.sum(lp > chosen, axis=-1) + 1
    # A masked token (-inf) adds nothing: 0 * -inf would be nan.
    entropy = -mx.sum(mx.where(lp > -mx.inf, mx.exp(lp) * lp, 0.0), axis=-1)
    out = [chosen[:, 0], rank, entropy]
    if top_k:
        ids = mx.argpartition(-lp, top_k - 1, axis=-1)[:, :top_k]
        vals = mx.take_along_axis(lp, ids, axis=-1)
        order = mx.argsort(-vals, axis=-1)
        out += [mx.take_along_axis(ids, order, axis=-1), mx.take_along_axis(vals, order, axis=-1)]
    return out


def listed_stats(out: list[mx.array], rows: int, top_k: int):
    """`stats_arrays` evaluated, as lists (alternatives a schema ruled out dropped)."""
    mx.eval(out)
    listed = [a.tolist() for a in out]
    if not top_k:
        listed += [[[] for _ in range(rows)]] * 2
    else:  # alternatives a schema ruled out are none
        for k in range(len(listed[3])):
            keep = [j for j, v in enumerate(listed[4][k]) if v != -math.inf]
            listed[3][k] = [listed[3][k][j] for j in keep]
            listed[4][k] = [listed[4][k][j] for j in keep]
    return tuple(listed)
