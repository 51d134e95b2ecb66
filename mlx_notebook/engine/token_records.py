"""Per-token records: a token's log-probability, rank, entropy and top alternatives.

`TokenTable` is a list of `TokenRecord` with the summaries people ask for
(perplexity, mean log-probability) and ``to_frame()``. Log-probabilities are
natural logs of the model's distribution after its logits processors, as
mlx-lm's ``generate_step`` reports them.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ..display import RichDisplay


@dataclass(frozen=True)
class TokenRecord:
    """One token and what the model thought of it.

    Attributes:
        index: Position among the scored (or generated) tokens, from 0.
        token_id: The token id.
        text: The token's text (a byte-fallback piece may show as ``�``); "" for a
            special token (end of turn, ``<|im_end|>``...), which is not text.
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
        special: The token is a special token (its text is ""; views show a marker).
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
    special: bool = False

    @property
    def prob(self) -> float:
        """The token's probability."""
        return math.exp(self.logprob)


_specials: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def special_ids(tokenizer) -> frozenset[int]:
    """The ids of ``tokenizer``'s special tokens (end of turn, BOS...), end-of-text included.

    A thinking model's reasoning markers (``<think>``) are left out: they are text the
    reasoning splitter reads. Computed once per tokenizer.
    """
    try:
        return _specials[tokenizer]
    except (KeyError, TypeError):
        pass
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    ids |= set(getattr(tokenizer, "eos_token_ids", None) or ())
    markers = {getattr(tokenizer, "think_start", None), getattr(tokenizer, "think_end", None)}
    markers.discard(None)
    if markers:
        ids = {i for i in ids if tokenizer.decode([i]) not in markers}
    found = frozenset(int(i) for i in ids)
    try:
        _specials[tokenizer] = found
    except TypeError:  # not weakly referable: computed again next time
        pass
    return found


def texts_of(tokenizer, specials: frozenset[int], ids) -> list[str]:
    """Each token's text; "" for a special token, which views never show as text."""
    return ["" if t in specials else tokenizer.decode([t]) for t in ids]


class TokenTable(RichDisplay, list):
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
        from ..frames import pandas

        pd = pandas()

        rows = [
            {
                "token": r.text,
                "id": r.token_id,
                "logprob": r.logprob,
                "prob": r.prob,
                "rank": r.rank,
                "entropy": r.entropy,
                "source": r.source,
                "special": r.special,
                "top": [f"{t!r} ({math.exp(lp):.3f})" for t, _, lp in r.top],
            }
            for r in self
        ]
        columns = ["token", "id", "logprob", "prob", "rank", "entropy", "source", "special", "top"]
        return pd.DataFrame(rows, columns=columns)


def position_stats(logits, targets, top_k: int, lse=None):
    """Per row of ``logits`` [L, V]: the target's logprob and rank, the entropy, the top-k.

    Computed on the host with numpy from the evaluated logits: on a CPU, MLX's
    elementwise ``exp`` over a 49k vocabulary costs about 0.7 ms (one thread, no
    SIMD), numpy's under 0.1 ms, and a decode step is about 25 ms.

    Args:
        logits: ``[L, V]`` (an MLX or numpy array; masked tokens at -inf).
        targets: L token ids (a sequence or an array).
        top_k: Alternatives per row (0..20).
        lse: Each row's ``mx.logsumexp`` ``[L, 1]``, evaluated with the step: the
            log-probabilities are then mlx-lm's to the last bit (its float32 sum
            over the vocabulary rounds apart from numpy's by up to about 1e-4).

    Returns:
        Lists ``(logprob, rank, entropy, top_ids, top_logprobs)``, one item per row;
        alternatives a schema ruled out (-inf) are dropped.
    """
    x = _host(logits)
    tg = np.asarray(targets, dtype=np.int64).reshape(-1)
    rows = np.arange(x.shape[0])
    if lse is None:
        m = x.max(axis=-1, keepdims=True)
        norm = m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    else:
        norm = _host(lse).reshape(-1, 1)
    lp = x - norm
    chosen = lp[rows, tg]
    rank = np.count_nonzero(x > x[rows, tg][:, None], axis=-1) + 1
    # -inf (a masked token) weighs 0: keep 0 * -inf from making nan.
    ent = -np.einsum("lv,lv->l", np.exp(lp), np.maximum(lp, np.float32(-1e30)))
    ids: list[list[int]] = [[] for _ in rows]
    lps: list[list[float]] = [[] for _ in rows]
    if top_k:
        part = np.argpartition(x, -top_k, axis=-1)[:, -top_k:]
        for r in rows:
            best = part[r][np.argsort(-x[r, part[r]], kind="stable")]
            vals = lp[r, best]
            keep = vals > -np.inf
            ids[r] = best[keep].tolist()
            lps[r] = vals[keep].tolist()
    return chosen.tolist(), rank.tolist(), ent.tolist(), ids, lps


def _host(logits) -> np.ndarray:
    """``logits`` as a float32 numpy array ``[L, V]`` (an evaluated MLX array is not copied)."""
    if isinstance(logits, np.ndarray):
        x = logits
    else:
        if logits.dtype != mx.float32:
            logits = logits.astype(mx.float32)
        x = np.asarray(logits)
    return x.reshape(-1, x.shape[-1]).astype(np.float32, copy=False)
