"""Per-token records of a generation, on every job path (``Request(logprobs=k)``).

Each path hands the recorder the logits it sampled a token from, in order
(`stash`); when the token is known, `record` turns the oldest stashed logits
into a `TokenRecord`: its log-probability under the distribution it was drawn
from (after the logits processors and a schema's mask, as mlx-lm reports
logprobs), under the raw model distribution, its rank, the entropy and the top
``k`` alternatives. Nothing of this runs when ``logprobs`` is None.

A token a schema forced without a pass (`forced`) gets probability 1 under
the mask, exactly what a path that ran a pass for it computes.
"""

from __future__ import annotations

from collections import deque

import mlx.core as mx

from .token_records import TokenRecord, listed_stats, position_stats, stats_arrays


class Recorder:
    """Stashed logits in, one `TokenRecord` per token out.

    Args:
        top_k: Alternatives per token (0..20).
        tokenizer: Decodes each token's text.
        chosen_first: The first token was chosen by the user (a branch): its
            record holds the model's own distribution there, source ``chosen``.
    """

    def __init__(self, top_k: int, tokenizer, chosen_first: bool = False) -> None:
        self.top_k = top_k
        self.tokenizer = tokenizer
        self.chosen_first = chosen_first
        self._stash: deque = deque()
        self.ready: deque = deque()
        self.index = 0

    def stash(self, logits: mx.array, raw: mx.array | None = None, forced: bool = False) -> None:
        """Logits ``[1, V]`` a token will be drawn from.

        Args:
            logits: After the processors and a schema's mask.
            raw: Before them (None: the same).
            forced: The mask allowed one token: it is recorded as `forced`.
        """
        self._stash.append((logits, raw, forced, None))

    def bind(self, sampled: mx.array) -> None:
        """Build the newest stash's statistics against the token ``sampled``, lazily.

        They start evaluating with it: recording then costs no extra wait.
        """
        logits, raw, forced, _ = self._stash[-1]
        if forced:
            return
        tgt = sampled.reshape(-1).astype(mx.uint32)
        arrays = stats_arrays(logits, tgt, self.top_k)
        raw_lp = None if raw is None else stats_arrays(raw, tgt, 0)[0]
        self._stash[-1] = (logits, raw, forced, (arrays, raw_lp))
        mx.async_eval(arrays if raw_lp is None else [*arrays, raw_lp])

    def clear(self) -> None:
        """Forget what is stashed (a verify pass's rows past the accepted ones)."""
        self._stash.clear()

    def emit(self, record: TokenRecord) -> None:
        """Queue ``record`` for the token about to be yielded (see `take`)."""
        self.ready.append(record)

    def take(self) -> TokenRecord | None:
        """The record of the token just yielded by a token generator."""
        return self.ready.popleft() if self.ready else None

    def record(self, token: int, source: str = "model") -> TokenRecord:
        """The record of ``token``, drawn from the oldest stashed logits."""
        logits, raw, forced, arrays = self._stash.popleft()
        if self.chosen_first and self.index == 0:  # its pass kept only the chosen token
            tgt = mx.array([token], dtype=mx.uint32)
            lp, rank, ent, ids, lps = (c[0] for c in position_stats(raw, tgt, self.top_k))
            return self._make(token, lp, rank, ent, ids, lps, "chosen", lp)
        if forced:  # the same record as where no pass ran for it
            return self.forced(token)
        if arrays is not None:  # bound to the sampled token, evaluated with it
            stats, raw_arr = arrays
            lp, rank, ent, ids, lps = (c[0] for c in listed_stats(stats, 1, self.top_k))
            raw_lp = lp if raw_arr is None else raw_arr.item()
            return self._make(token, lp, rank, ent, ids, lps, source, raw_lp)
        tgt = mx.array([token], dtype=mx.uint32)
        lp, rank, ent, ids, lps = (c[0] for c in position_stats(logits, tgt, self.top_k))
        raw_lp = lp if raw is None else position_stats(raw, tgt, 0)[0][0]
        return self._make(token, lp, rank, ent, ids, lps, source, raw_lp)

    def forced(self, token: int) -> TokenRecord:
        """A token a schema forced without a forward pass: probability 1 under its mask."""
        top = [token] if self.top_k else []
        return self._make(token, 0.0, 1, 0.0, top, [0.0] * len(top), "grammar", None)

    def _make(self, token, lp, rank, ent, ids, lps, source, raw_lp) -> TokenRecord:
        dec = self.tokenizer.decode
        top = tuple((dec([t]), t, v) for t, v in zip(ids, lps))
        rec = TokenRecord(self.index, token, dec([token]), lp, rank, ent, top, source, raw_lp)
        self.index += 1
        return rec
