"""A server's per-token log-probabilities, as `TokenRecord`s.

OpenAI-compatible servers stream them in one of two shapes: chat completions
put ``{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}`` per token
in ``choices[i].logprobs.content``; legacy completions put parallel lists
``tokens``, ``token_logprobs`` and ``top_logprobs`` (dicts of token to
logprob) in ``choices[i].logprobs``. A server gives no entropy and usually no
token ids: those stay NaN and -1. Ranks come from the alternatives sent, so a
token outside them ranks after all of them.
"""

from __future__ import annotations

import math

from ..token_records import TokenRecord


def request_fields(k: int) -> dict:
    """The body fields that ask a server for ``k`` alternatives per token.

    The chat API's shape on both endpoints: mlx_lm.server refuses the legacy
    completions' ``logprobs: k`` (it wants a bool there too).
    """
    return {"logprobs": True, "top_logprobs": k}


def records_of(choice: dict, start: int, k: int) -> list[TokenRecord]:
    """The records a streamed ``choice`` carries (none when it has no logprobs).

    Args:
        choice: One ``choices`` item of a chunk.
        start: Index of its first token among the generated ones.
        k: Alternatives to keep per token.
    """
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return []
    items = []
    if isinstance(lp.get("content"), list):  # chat completions
        for c in lp["content"]:
            if isinstance(c, dict):
                tops = [(t.get("token", ""), t.get("logprob")) for t in c.get("top_logprobs") or []]
                items.append((c.get("token", ""), c.get("logprob"), tops, c.get("id")))
    elif isinstance(lp.get("tokens"), list):  # legacy completions
        values = lp.get("token_logprobs") or []
        tops = lp.get("top_logprobs") or []
        for i, (tok, v) in enumerate(zip(lp["tokens"], values)):
            top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
            items.append((tok, v, list(top.items()), None))
    out = []
    for j, (text, value, tops, tid) in enumerate(items):
        value = _num(value)
        if value is None:
            continue
        alts = sorted(((str(t), v) for t, v in tops if _num(v) is not None), key=lambda a: -a[1])
        rank = 1 + sum(1 for t, v in alts if v > value and t != text)
        top = tuple((t, -1, float(v)) for t, v in alts[:k])
        tid = tid if isinstance(tid, int) else -1
        out.append(TokenRecord(start + j, tid, str(text), value, rank, math.nan, top, "model"))
    return out


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
