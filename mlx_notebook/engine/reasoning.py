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
