"""A branch's first token on the worker: its id, and the logits processor that picks it.

What a branch is (`BranchPoint`, `branch_request`) lives in the seam (`engine.branch`);
here it becomes a processor acting only on the branch's first position, so it runs
on the ordinary job paths.
"""

from __future__ import annotations

import mlx.core as mx

from .forcing import only, without


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
