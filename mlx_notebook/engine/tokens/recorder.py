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

from ..decoding import sampling
from ..token_records import TokenRecord, position_stats, special_ids, texts_of


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
        self.specials = special_ids(tokenizer)

    def stash(self, logits: mx.array, raw: mx.array | None = None, forced: bool = False) -> None:
        """Logits ``[1, V]`` a token will be drawn from.

        Args:
            logits: After the processors and a schema's mask.
            raw: Before them (None: the same).
            forced: The mask allowed one token: it is recorded as `forced`.
        """
        self._stash.append((logits, raw, forced, None))

    def bind(self, sampled: mx.array) -> None:
        """Have the newest stash's logits and their log-sum-exp evaluated with ``sampled``.

        The rest of the statistics are computed on the host when the token is
        recorded (`position_stats`): no extra wait, and far cheaper than in MLX
        on a CPU.
        """
        logits, raw, forced, _ = self._stash[-1]
        if forced:
            return
        logits = logits if logits.dtype == mx.float32 else logits.astype(mx.float32)
        # MLX's normalizer to the last bit (the fast path's kernel computes the same).
        lse = sampling.logsumexp(logits)
        if raw is not None and raw.dtype != mx.float32:
            raw = raw.astype(mx.float32)
        self._stash[-1] = (logits, raw, forced, lse)
        mx.async_eval([logits, lse] + ([raw] if raw is not None else []))

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
        logits, raw, forced, lse = self._stash.popleft()
        tgt = [token]
        if self.chosen_first and self.index == 0:  # its pass kept only the chosen token
            lp, rank, ent, ids, lps = (c[0] for c in position_stats(raw, tgt, self.top_k))
            return self._make(token, lp, rank, ent, ids, lps, "chosen", lp)
        if forced:  # the same record as where no pass ran for it
            return self.forced(token)
        if lse is None:  # a verify pass's row: its normalizer as mlx-lm computes it
            lse = sampling.logsumexp(logits.astype(mx.float32))
        stats = position_stats(logits, tgt, self.top_k, lse)
        lp, rank, ent, ids, lps = (c[0] for c in stats)
        raw_lp = lp if raw is None else position_stats(raw, tgt, 0)[0][0]
        return self._make(token, lp, rank, ent, ids, lps, source, raw_lp)

    def forced(self, token: int) -> TokenRecord:
        """A token a schema forced without a forward pass: probability 1 under its mask."""
        top = [token] if self.top_k else []
        return self._make(token, 0.0, 1, 0.0, top, [0.0] * len(top), "grammar", None)

    def _make(self, token, lp, rank, ent, ids, lps, source, raw_lp) -> TokenRecord:
        texts = texts_of(self.tokenizer, self.specials, [token, *ids])
        top = tuple(zip(texts[1:], ids, lps))
        special = token in self.specials
        rec = TokenRecord(self.index, token, texts[0], lp, rank, ent, top, source, raw_lp, special)
        self.index += 1
        return rec
