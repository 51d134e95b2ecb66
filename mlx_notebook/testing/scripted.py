"""Scripted stand-ins for a model and a clock: deterministic streams for engine tests.

- `ScriptedModel`: an mlx-lm-compatible module whose next token follows a
  script, for deterministic stop-string, cancel and speculative tests.
- `VirtualClock`: time that moves only when told (or when a `ScriptedModel`
  "works"), for timing tests that a busy machine cannot disturb.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


class VirtualClock:
    """Seconds that pass only through `sleep`, which returns at once.

    Give it to code that takes a clock (a view's, ``mlx_notebook.engine.decoding.prefill.clock``)
    and to a `ScriptedModel`: measured times are then exactly what the test or the
    model's script spent, however loaded the machine is.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        """The current virtual time in seconds."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds``."""
        self.now += seconds


class ScriptedModel:
    """A fake-free stand-in for an LM: real KV cache, logits from a rule.

    The token after position ``p`` (0-based, counting the prompt) is
    ``rule(p, token_at_p)``. Build it on the worker thread (``engine.call``).

    Args:
        vocab_size: Logit width.
        rule: ``(position, token) -> next token``.
        delay_s: Sleep per forward call, to make cancel timing observable.
        token_delay_s: Extra sleep per input token, so prefill cost grows with length.
        pos_delay_s: Extra sleep per input token per earlier token, as attention costs.
        square: Attention over the whole square of a chunk's scores (each input token
            per every token up to the chunk's end), as MLX's masked CPU fallback costs,
            rather than only the earlier ones.
        fail_at: Raise RuntimeError when a forward call reaches this position.
        clock: Spend the delays on this `VirtualClock` instead of sleeping.
    """

    def __init__(
        self,
        vocab_size: int,
        rule: Callable[[int, int], int],
        delay_s: float = 0.0,
        token_delay_s: float = 0.0,
        fail_at: int | None = None,
        pos_delay_s: float = 0.0,
        clock: VirtualClock | None = None,
        square: bool = False,
    ) -> None:
        import mlx.nn as nn

        self.vocab_size = vocab_size
        self.rule = rule
        self.delay_s = delay_s
        self.token_delay_s = token_delay_s
        self.pos_delay_s = pos_delay_s
        self.square = square
        self.fail_at = fail_at
        self.sleep = time.sleep if clock is None else clock.sleep
        self.layers = [nn.Identity()]  # one KV cache slot
        self.calls = 0

    def parameters(self):
        """No weights."""
        return {}

    def set_dtype(self, dtype) -> None:
        """Nothing to cast."""

    def __call__(self, inputs, cache=None):
        """Logits [1, L, vocab] peaked at the rule's next token for each input position."""
        import mlx.core as mx

        self.calls += 1
        batch, c = inputs.tolist(), cache[0]
        # A batched cache (several rows, left-padded) has one offset per row.
        starts = c.offset.tolist() if isinstance(c.offset, mx.array) else [c.offset]
        n, start = len(batch[0]), max(starts)
        # One sleep per call, whatever the batch: decoding B rows costs about one row.
        seen = start + (n if self.square else n / 2)  # keys a token of the chunk meets
        wait = self.delay_s + self.token_delay_s * n + self.pos_delay_s * n * seen
        if wait:
            self.sleep(wait)
        if self.fail_at is not None and start + n > self.fail_at:
            raise RuntimeError(f"scripted failure at position {self.fail_at}")
        kv = mx.zeros((len(batch), 1, n, 1))
        c.update_and_fetch(kv, kv)
        rows = [[self.rule(s + i, t) for i, t in enumerate(ids)] for s, ids in zip(starts, batch)]
        logits = mx.full((len(batch), n, self.vocab_size), -30.0)
        return logits + 60.0 * mx.eye(self.vocab_size)[mx.array(rows)]


def looping_model(tokenizer, text: str, delay_s: float = 0.0) -> ScriptedModel:
    """A `ScriptedModel` that repeats ``text``'s tokens forever: a reply that never ends.

    For tests that must stop a reply: a real model may end its text before the Stop.
    Build it on the worker thread (``engine.call``), or register it with
    ``Engine.register_model``.
    """
    words = tokenizer.encode(text, add_special_tokens=False)
    vocab = len(tokenizer.get_vocab())
    return ScriptedModel(vocab, lambda pos, _tok: words[pos % len(words)], delay_s=delay_s)


def script_rule(prompt_len: int, outputs: Sequence[int], fill: int) -> Callable[[int, int], int]:
    """Rule that emits ``outputs`` right after a prompt of ``prompt_len`` tokens."""

    def rule(pos: int, _tok: int) -> int:
        k = pos - (prompt_len - 1)
        return outputs[k] if 0 <= k < len(outputs) else fill

    return rule
