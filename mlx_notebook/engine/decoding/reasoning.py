"""A thinking model's reply, split into its reasoning and its answer as it streams.

mlx-lm knows each tokenizer's thinking markers (``<think>``/``</think>``,
Gemma 4's channel markers, ...) and matches them on decoded text with its
`TextStateMachine`, holding back text that may be the start of a marker; its
server splits replies the same way. The prompt says where a reply begins: a
template that opened a thinking block (Qwen3 with thinking on) starts it in
the reasoning state.
"""

from __future__ import annotations

from collections.abc import Sequence


class ReasoningSplitter:
    """Routes each piece of decoded text to the answer or to the reasoning.

    Args:
        tokenizer: mlx-lm's `TokenizerWrapper` of a thinking model.
        prompt: The prompt's token ids.
    """

    def __init__(self, tokenizer, prompt: Sequence[int]) -> None:
        from mlx_lm.generate import TextStateMachine

        self._sm = TextStateMachine(
            {
                "normal": [(tokenizer.think_start, "reasoning")],
                "reasoning": [(tokenizer.think_end, "normal")],
            }
        )
        opened = tokenizer.rfind_think_start(list(prompt))
        closed = tokenizer.rfind_think_end(list(prompt))
        self._state = self._sm.make_state("reasoning" if opened > closed else "normal")

    @classmethod
    def for_job(cls, request, tokenizer, prompt: Sequence[int]) -> ReasoningSplitter | None:
        """A splitter when ``tokenizer`` has thinking markers and the job is a chat."""
        if not request.chat or not getattr(tokenizer, "has_thinking", False):
            return None
        return cls(tokenizer, prompt)

    def feed(self, text: str) -> tuple[str, str]:
        """``(answer, reasoning)`` released by ``text`` (markers dropped)."""
        self._state, segments = self._sm.split(self._state, text)
        return _join(segments)

    def flush(self) -> tuple[str, str]:
        """Release the text held back as a possible marker start, at the end."""
        self._state, text, state = self._sm.flush(self._state)
        return ("", text) if state == "reasoning" else (text, "")


def _join(segments) -> tuple[str, str]:
    answer = "".join(t for s, t in segments if s != "reasoning")
    thought = "".join(t for s, t in segments if s == "reasoning")
    return answer, thought


class EndThinking:
    """A logits processor that ends a thinking model's reasoning when its job asks.

    Until `Job.end_thinking` is called it changes nothing. Then, at the first
    position it is asked about, it checks the context: inside a thinking block
    it forces the end-of-thinking marker's tokens there (one per position), so
    the answer starts at once; elsewhere it does nothing. Positions come from
    the context's length, which every path gives alike (alone, batched, each row
    of a verify pass), so a pass that is evaluated again forces the same tokens.

    Args:
        job: The job whose `thinking_ended` it watches.
        tokenizer: mlx-lm's `TokenizerWrapper` of a thinking model.
    """

    def __init__(self, job, tokenizer) -> None:
        self.job = job
        self.tokenizer = tokenizer
        self.marker = list(tokenizer.encode(tokenizer.think_end, add_special_tokens=False))
        self.start: int | None = None  # where the marker goes; -1: nothing to end

    def __call__(self, tokens, logits):
        """``logits`` at the position after ``tokens`` (the context), forced where due."""
        n = tokens.shape[-1]
        if self.start is None:
            if not self.job.thinking_ended:
                return logits
            ctx = tokens.tolist()  # once: only when asked
            inside = self.tokenizer.rfind_think_start(ctx) > self.tokenizer.rfind_think_end(ctx)
            self.start = n if inside else -1
        k = n - self.start
        if self.start < 0 or not 0 <= k < len(self.marker):
            return logits
        from ..tokens.forcing import only

        return only(logits, self.marker[k])
