"""Branching a generation at one of its tokens: what a branch is, as a request.

A branch is a request for the same prompt whose reply starts with the parent's
first ``i`` generated tokens (fed as prompt, so the prompt cache the parent left
serves them: only the last one is fed again), then a chosen token (or a fresh
draw that avoids the parent's), then decoding as usual. Part of the seam: no MLX
here; the worker turns the choice into a logits processor (`tokens.branching`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

__all__ = ["BranchPoint", "branch_request"]


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
