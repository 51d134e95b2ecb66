"""Constrained decoding: a grammar decides, token by token, which tokens may come next.

The grammar engine is llguidance (Rust, no torch): it compiles a JSON Schema,
regular expression or Lark grammar against the model's vocabulary and answers
each step with a bitmask of allowed tokens in about 0.05 ms on a 49k vocabulary.
The mask is applied to the logits after the logits processors and before
sampling (disallowed tokens get -inf), on the worker thread, on every path:

* alone: one mask per step (the next step waits for the token it depends on);
* batched: one mask per constrained row;
* speculative: the verify pass gets one mask per position, computed by walking
  the drafts through the grammar and rolling back, so a draft the grammar
  refuses is never accepted and the text is exactly constrained decoding's.

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


class Constraint:
    """One job's grammar state: the mask of allowed next tokens, and what was consumed.

    Args:
        info: From `grammar_info`.
        grammar: An llguidance grammar (`mlx_notebook.schema.Schema.grammar`).
        width: Width of the model's logits (may exceed the vocabulary).

    Raises:
        ValueError: The grammar does not compile against this vocabulary.
    """

    def __init__(self, info, grammar: str, width: int, eos: list[int] = ()) -> None:
        import llguidance
        import llguidance.numpy as lnp

        self._lnp = lnp
        self.matcher = llguidance.LLMatcher(info, grammar)
        if self.matcher.is_error():
            raise ValueError(f"schema: {self.matcher.get_error()}")
        self.width = width
        self._only_eos = np.zeros(width, dtype=bool)
        self._only_eos[[e for e in eos if 0 <= e < width]] = True
        self._bits = lnp.allocate_token_bitmask(1, info.vocab_size)
        self._shifts = np.arange(32, dtype=np.uint32)

    @property
    def stopped(self) -> bool:
        """Whether the grammar has ended (nothing more may be generated)."""
        return self.matcher.is_stopped()

    def allowed(self) -> np.ndarray:
        """Boolean mask over the logits' width: the tokens allowed next."""
        self._lnp.fill_next_token_bitmask(self.matcher, self._bits)
        words = self._bits[0].view(np.uint32)
        bits = ((words[:, None] >> self._shifts) & 1).astype(bool).reshape(-1)
        out = np.zeros(self.width, dtype=bool)
        n = min(self.width, bits.size)
        out[:n] = bits[:n]
        return out

    def mask(self, logits: mx.array) -> mx.array:
        """``logits`` (shape ``[..., width]``) with every disallowed token at -inf.

        An ended grammar allows only end-of-sequence (the job ends before it
        samples, except a batch row, whose extra sample is dropped).
        """
        allow = mx.array(self._only_eos if self.stopped else self.allowed())
        return mx.where(allow, logits, mx.array(-float("inf"), dtype=logits.dtype))

    def consume(self, tokens: list[int]) -> None:
        """Advance past generated ``tokens`` (each must be allowed)."""
        for t in tokens:
            if self.stopped:
                return
            if not self.matcher.consume_token(int(t)):
                raise RuntimeError(f"constraint: token {t} was not allowed here")

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
            if i == len(drafts) or not self.matcher.try_consume_tokens([int(drafts[i])]):
                break
            taken += 1
        if taken:
            self.matcher.rollback(taken)
        return masks
