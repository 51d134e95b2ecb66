"""Branching a generation at one of its tokens: continue from there with another token.

A branch is a request for the same prompt whose reply starts with the parent's
first ``i`` generated tokens (fed as prompt, so the prompt cache the parent left
serves them: only the last one is fed again), then a chosen token (or a fresh
draw that avoids the parent's), then decoding as usual. Everything runs on the
ordinary job paths: the choice is a logits processor on the first position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import mlx.core as mx

from .forcing import only, without


@dataclass(frozen=True)
class BranchPoint:
    """Where a branch starts (``Request(branch_from=...)``).

    Attributes:
        prefix: The parent's generated token ids before the branch point; they
            follow the encoded prompt and are not part of the branch's output.
        token: The branch's first token: an id, or text that encodes to one
            token. None draws it afresh under the request's sampling.
        avoid: With ``token=None``, a token the fresh draw must not pick (the
            parent's own), so the branch really departs there.
    """

    prefix: tuple[int, ...] = ()
    token: int | str | None = None
    avoid: int | None = None

    def check(self) -> None:
        """Raise `ValueError` naming what is wrong."""
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.prefix):
            raise ValueError("branch_from: prefix must be token ids (ints >= 0)")
        tok = self.token
        if isinstance(tok, str) and not tok:
            raise ValueError("branch_from: token text must not be empty")
        if tok is not None and not isinstance(tok, str) and not _is_id(tok):
            raise ValueError(f"branch_from: token must be an id or its text (got {tok!r})")
        if self.avoid is not None and (tok is not None or not _is_id(self.avoid)):
            raise ValueError("branch_from: avoid is a token id, and only without token")


def _is_id(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def token_id(token: int | str, tokenizer, vocab: int) -> int:
    """The id of ``token`` (an id, or text that must encode to exactly one token).

    Raises:
        ValueError: Out of the vocabulary, or text of several tokens.
    """
    if isinstance(token, str):
        ids = list(tokenizer.encode(token, add_special_tokens=False))
        if len(ids) != 1:
            raise ValueError(
                f"branch token {token!r} is {len(ids)} tokens here ({ids}); pass one token's "
                "text or its id (the parent's alternatives are in .tokens)"
            )
        token = ids[0]
    if not 0 <= token < vocab:
        raise ValueError(f"branch token id {token} is outside the vocabulary (0..{vocab - 1})")
    return token


def first_token_processor(n: int, token: int | None = None, avoid: int | None = None):
    """A logits processor acting only where the context is ``n`` tokens long.

    There it keeps only ``token``, or removes ``avoid``. Processors see the whole
    context on every path (alone, batched, each row of a verify pass), so its
    length says which position is being sampled.
    """

    def process(tokens: mx.array, logits: mx.array) -> mx.array:
        if tokens.shape[-1] != n:
            return logits
        return only(logits, token) if token is not None else without(logits, avoid)

    return process


def branch_request(
    request,
    generated: Sequence[int],
    i: int,
    token: int | str | None = None,
    **overrides,
):
    """A `Request` continuing ``request``'s generation from its ``i``-th token.

    Args:
        request: The parent's request.
        generated: The parent's generated token ids.
        i: The position to branch at, in ``0..len(generated)``.
        token: The branch's first token (id or one token's text); None draws it
            again, avoiding the parent's token there.
        **overrides: Request fields to change (``temperature``, ``max_tokens``...).
            ``max_tokens`` defaults to what the parent had left at ``i``, and
            ``remember`` to False (an exploration does not teach suffix drafting).

    Raises:
        IndexError: ``i`` is out of range.
    """
    n = len(generated)
    if not 0 <= i <= n:
        raise IndexError(f"branch at {i}: the generation has {n} tokens (0..{n})")
    avoid = generated[i] if token is None and i < n else None
    point = BranchPoint(tuple(int(t) for t in generated[:i]), token, avoid)
    fields = dict(max_tokens=max(1, request.max_tokens - i), remember=False)
    fields.update(overrides)
    return replace(request, branch_from=point, **fields)
