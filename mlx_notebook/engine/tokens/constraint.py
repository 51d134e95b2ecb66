"""Constrained decoding: a grammar decides, token by token, which tokens may come next.

The grammar engine is llguidance (Rust, no torch): it compiles a JSON Schema,
regular expression or Lark grammar against the model's vocabulary and answers
each step with a bitmask of allowed tokens in about 0.2 ms on a 49k vocabulary.
The mask is applied to the logits after the logits processors and before
sampling (disallowed tokens get -inf), on the worker thread, on every path:

* alone: one mask per step (the next step waits for the token it depends on);
* batched: one mask per constrained row;
* speculative: the verify pass gets one mask per position, computed by walking
  the drafts through the grammar and rolling back, so a draft the grammar
  refuses is never accepted and the text is exactly constrained decoding's.

Two fast paths (``Schema.fast``, on by default):

* **forced tokens**: where the grammar allows the text only one way
  (``{"name": "`` and the like), the mask allows just that token (llguidance's
  fast-forward tokens), so every path writes the same tokens; a job decoding
  alone appends them without sampling and feeds them in one pass;
* **choices** (`ChoiceConstraint`; also a schema that is one enum, such as
  ``Literal["pos", "neg"]``): the choices' own token sequences form a trie; a
  position where they part takes one forward pass, and a position where only one
  choice remains is forced.

Once the grammar is complete only the end-of-sequence token is allowed, so a
constrained job ends by itself, with finish reason ``stop``.
"""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np

_lock = threading.Lock()


def grammar_info(tokenizer, n_vocab: int | None = None):
    """The grammar engine's view of ``tokenizer`` (an mlx-lm `TokenizerWrapper`), built once.

    Building it walks the whole vocabulary (about a second), so it is kept on
    the tokenizer object.
    """
    key = ("_mlxnb_llg", n_vocab)
    with _lock:
        cached = getattr(tokenizer, "_mlxnb_llg", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        import llguidance.hf

        hf = getattr(tokenizer, "_tokenizer", tokenizer)
        info = llguidance.hf.from_tokenizer(
            hf, n_vocab=n_vocab, eos_token=list(tokenizer.eos_token_ids)
        )
        tokenizer._mlxnb_llg = (key, info)
        return info


def for_schema(schema, tokenizer, width: int):
    """The grammar state for one job of ``schema`` (`mlx_notebook.schema.Schema`).

    Raises:
        ValueError: The model's tokenizer cannot write what the schema needs.
    """
    eos = list(tokenizer.eos_token_ids)
    texts = schema.choice_texts()  # choices, or a top-level enum's JSON texts
    if texts and schema.fast:
        return ChoiceConstraint(tokenizer, texts, width, eos)
    info = grammar_info(tokenizer, width)
    return Constraint(info, schema.grammar, width, eos, jump=schema.fast)


class _Grammar:
    """What every grammar state shares: masking, forced runs and the verify walk.

    A subclass provides `stopped`, `allowed`, `_forced` (the one token the
    grammar allows next, or None), `_advance` and `_rollback`.
    """

    def __init__(self, width: int, eos) -> None:
        self.width = width
        self.last_forced = False  # whether the last `mask` allowed just one token
        self._only_eos = np.zeros(width, dtype=bool)
        self._only_eos[[e for e in eos if 0 <= e < width]] = True

    def _one(self, token: int) -> np.ndarray:
        out = np.zeros(self.width, dtype=bool)
        out[token] = True
        return out

    def _check(self, allow: np.ndarray, where: str) -> np.ndarray:
        if not allow.any():  # sampling from all -inf would write garbage
            raise ValueError(f"schema: the model's tokenizer cannot write {where}")
        return allow

    def mask(self, logits: mx.array) -> mx.array:
        """``logits`` (shape ``[..., width]``) with every disallowed token at -inf.

        An ended grammar allows only end-of-sequence (the job ends before it
        samples, except a batch row, whose extra sample is dropped).
        """
        allow = self._only_eos if self.stopped else self.allowed()
        self.last_forced = not self.stopped and int(allow.sum()) == 1
        return mx.where(mx.array(allow), logits, mx.array(-float("inf"), dtype=logits.dtype))

    def consume(self, tokens: list[int]) -> None:
        """Advance past generated ``tokens`` (each must be allowed)."""
        for t in tokens:
            if self.stopped:
                return
            if not self._advance(int(t)):
                raise ValueError(
                    f"schema: token {t} was not allowed here (the model's tokenizer may "
                    "be unable to write what the schema needs)"
                )

    def take_forced(self) -> int | None:
        """Consume and return the one token the grammar now allows, if it allows only one."""
        t = None if self.stopped else self._forced()
        if t is not None:
            self._advance(t)
        return t

    def forced_ending(self, limit: int) -> list[int]:
        """The forced tokens that complete the grammar, else ``[]``; the state does not change.

        A batch row writes them at once and ends, instead of feeding each in a
        step. Up to ``limit`` tokens count too: the row ends there anyway.
        """
        taken: list[int] = []
        while len(taken) < limit:
            t = self.take_forced()
            if t is None:
                break
            taken.append(t)
        ends = self.stopped or len(taken) == limit
        if taken:
            self._rollback(len(taken))
        return taken if ends else []

    def walk(self, drafts: list[int]) -> list[np.ndarray]:
        """Masks for a verify pass: one per position, as far as the grammar accepts drafts.

        Mask ``i`` holds after ``drafts[:i]``. The walk stops at the first draft
        the grammar refuses (no later position can be accepted), and the state is
        rolled back to where it was.
        """
        masks, taken = [], 0
        for i in range(len(drafts) + 1):
            if self.stopped:
                break
            masks.append(self.allowed())
            if i == len(drafts) or not masks[-1][int(drafts[i])]:
                break
            self._advance(int(drafts[i]))
            taken += 1
        if taken:
            self._rollback(taken)
        return masks


class Constraint(_Grammar):
    """One job's llguidance grammar state: the mask of allowed next tokens.

    Args:
        info: From `grammar_info`.
        grammar: An llguidance grammar (`mlx_notebook.schema.Schema.grammar`).
        width: Width of the model's logits (may exceed the vocabulary).
        eos: End-of-sequence token ids.
        jump: Force the tokens the grammar allows only one way (llguidance's
            fast-forward tokens); False masks every step with the full set.

    Raises:
        ValueError: The grammar does not compile against this vocabulary, or
            the vocabulary cannot write any text it allows.
    """

    def __init__(self, info, grammar: str, width: int, eos=(), jump: bool = True) -> None:
        import llguidance
        import llguidance.numpy as lnp

        super().__init__(width, eos)
        self._lnp = lnp
        self.jump = jump
        self.matcher = llguidance.LLMatcher(info, grammar, log_level=0)  # errors: ours
        # The forced token of the current state, computed once per state: a step asks
        # after consuming (`take_forced`) and again when masking.
        self._moves = 0
        self._ff_at, self._ff = -1, None
        if self.matcher.is_error():
            raise ValueError(f"schema: {self.matcher.get_error()}")
        self._bits = lnp.allocate_token_bitmask(1, info.vocab_size)
        self._shifts = np.arange(32, dtype=np.uint32)
        self._refuse_unwritable()

    @property
    def stopped(self) -> bool:
        """Whether the grammar has ended (nothing more may be generated)."""
        return self.matcher.is_stopped()

    def _refuse_unwritable(self) -> None:
        """Refuse now a grammar whose opening text (what it forces) the vocabulary cannot write.

        Walks a copy through the forced tokens: a character missing from the
        vocabulary (no byte fallback) shows up as an empty mask or a parser error.
        """
        real, self.matcher = self.matcher, self.matcher.deep_copy()
        try:
            for _ in range(512):
                if self.stopped or self.matcher.is_error():
                    break
                t = self.matcher.compute_ff_tokens()
                if not t or not self.matcher.consume_token(t[0]):
                    break
            if self.matcher.is_error():  # a forced token the parser then refused
                self._check(np.zeros(1, dtype=bool), "the text this schema starts with")
            if not self.stopped:
                allow = self._check(self._full(), "the text this schema starts with")
                # Text it must write next that no allowed token can: the mask falls
                # back to tokens the parser then refuses.
                if self.matcher.compute_ff_bytes():
                    ids = np.flatnonzero(allow)[:256].tolist()
                    if not any(self.matcher.validate_tokens([t]) for t in ids):
                        self._check(allow & False, "the text this schema starts with")
        finally:
            self.matcher = real

    def _full(self) -> np.ndarray:
        self._lnp.fill_next_token_bitmask(self.matcher, self._bits)
        if self.matcher.is_error():
            raise ValueError(
                "schema: the model's tokenizer cannot write what this schema needs next"
            )
        words = self._bits[0].view(np.uint32)
        bits = ((words[:, None] >> self._shifts) & 1).astype(bool).reshape(-1)
        out = np.zeros(self.width, dtype=bool)
        n = min(self.width, bits.size)
        out[:n] = bits[:n]
        return out

    def allowed(self) -> np.ndarray:
        """Boolean mask over the logits' width: the tokens allowed next."""
        forced = self._forced()
        if forced is not None:
            return self._one(forced)
        return self._check(self._full(), "what this schema needs next")

    def _forced(self) -> int | None:
        if not self.jump:
            return None
        if self._ff_at != self._moves:
            ff = self.matcher.compute_ff_tokens()
            self._ff = int(ff[0]) if ff and 0 <= ff[0] < self.width else None
            self._ff_at = self._moves
        return self._ff

    def _advance(self, token: int) -> bool:
        self._moves += 1
        return bool(self.matcher.consume_token(token))

    def _rollback(self, n: int) -> None:
        self._moves += 1
        self.matcher.rollback(n)


class ChoiceConstraint(_Grammar):
    """Exactly one of ``choices``, over the choices' own token sequences.

    The tokenizer's encoding of each choice is a path in a trie; the mask allows
    the children of the current node (and end-of-sequence where a choice ends
    and a longer one goes on). Where one choice remains, its tokens are forced.

    Raises:
        ValueError: The tokenizer cannot write a choice (it does not round-trip).
    """

    def __init__(self, tokenizer, choices, width: int, eos) -> None:
        super().__init__(width, eos)
        self._end = [e for e in eos if 0 <= e < width]
        self._root: dict = {}
        for c in choices:
            ids = list(tokenizer.encode(c, add_special_tokens=False))
            if not ids or tokenizer.decode(ids) != c or max(ids) >= width:
                raise ValueError(f"choice: the model's tokenizer cannot write {c!r}")
            node = self._root
            for t in ids:
                node = node.setdefault(t, {})
            node[None] = True  # a choice ends here
        self._path = [self._root]

    @property
    def _node(self) -> dict:
        return self._path[-1]

    @property
    def stopped(self) -> bool:
        """Whether a choice is complete and no longer one goes on from it."""
        return list(self._node) == [None]

    def _next(self) -> list[int]:
        return [t for t in self._node if t is not None]

    def allowed(self) -> np.ndarray:
        """The tokens that continue some choice (and end-of-sequence where one ends)."""
        out = np.zeros(self.width, dtype=bool)
        out[self._next()] = True
        if None in self._node:
            out[self._end] = True
        return out

    def _forced(self) -> int | None:
        nxt = self._next()
        return nxt[0] if len(nxt) == 1 and None not in self._node else None

    def _advance(self, token: int) -> bool:
        if token in self._node:
            self._path.append(self._node[token])
            return True
        if None in self._node and token in self._end:
            self._path.append({None: True})  # ended by end-of-sequence
            return True
        return False

    def _rollback(self, n: int) -> None:
        del self._path[-n:]
