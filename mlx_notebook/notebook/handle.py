"""Result handles bound by ``%%generate -o NAME`` and returned by `mlx_notebook.last`."""

from __future__ import annotations

from ..engine.events import Finished, Stats, Token
from ..engine.job import Job

_last: GenerationHandle | None = None


class GenerationHandle:
    """One generation's result: a future while it runs.

    Final values (`text`, `reasoning`, `stats`, `finish_reason`) wait until the
    generation has ended, so a notebook run top to bottom (Run All) reads
    finished text; Ctrl-C or ■ while waiting stops it and keeps what it wrote.
    Live values say so: `partial_text`, `partial_reasoning`, `done`.

    Args:
        job: The engine job.
        model: Model name for the repr.
    """

    def __init__(self, job: Job, model: str) -> None:
        self.job = job
        self.model = model

    def _so_far(self, part: str) -> str:
        fin = self.job.finished
        if fin is not None:
            return getattr(fin, part)
        return "".join(getattr(e, part) for e in list(self.job._log) if isinstance(e, Token))

    def _final(self) -> Finished:
        fin = self.job.finished
        if fin is None:
            try:
                fin = self.job.wait()
            except KeyboardInterrupt:  # stop it, keeping its text, then let Ctrl-C through
                self.job.cancel()
                self.job.wait()
                raise
        return fin

    @property
    def text(self) -> str:
        """The whole text: waits for the generation to end (see `partial_text`)."""
        return self._final().text

    @property
    def partial_text(self) -> str:
        """The text so far, without waiting (the whole text once `done`)."""
        return self._so_far("text")

    @property
    def reasoning(self) -> str:
        """A thinking model's reasoning, apart from `text`: waits for the end."""
        return self._final().reasoning

    @property
    def partial_reasoning(self) -> str:
        """The reasoning so far, without waiting."""
        return self._so_far("reasoning")

    @property
    def done(self) -> bool:
        """Whether generation has ended."""
        return self.job.done

    @property
    def finish_reason(self) -> str:
        """``stop``, ``length``, ``cancelled`` or ``error``: waits for the end."""
        return self._final().finish_reason

    @property
    def stats(self) -> Stats:
        """Timing figures: waits for the end."""
        return self._final().stats

    @property
    def value(self):
        """The parsed value of a ``--schema``/``--choice``/``--regex`` generation: waits.

        A pydantic instance when a model class was given. Raises one line if the
        generation ended before the value was complete (`.text` keeps the part).
        """
        from ..schema import value_of

        fin = self._final()
        return value_of(self.job.request.constraint, fin.text, fin.finish_reason)

    @property
    def tokens(self):
        """Per-token records (``--logprobs K`` or ``--inspect``), a `TokenTable`: waits."""
        return self.job.result(raise_on_error=False).tokens

    @property
    def perplexity(self) -> float:
        """Perplexity of the generated text (``--logprobs``): waits."""
        return self.tokens.perplexity

    @property
    def error(self) -> str | None:
        """Error text when ``finish_reason == "error"``: waits for the end."""
        return self._final().error

    def wait(self, timeout: float | None = None) -> GenerationHandle:
        """Block until done. Ctrl-C / kernel interrupt cancels the job and re-raises."""
        self.job.result(timeout)
        return self

    def cancel(self) -> None:
        """Stop the generation (keeps the partial text)."""
        self.job.cancel()

    def finished(self) -> Finished | None:
        """The terminal event, or None."""
        return self.job.finished

    def __repr__(self) -> str:
        fin = self.job.finished
        state = fin.finish_reason if fin else "running" if self.job.position is None else "queued"
        text = self.partial_text
        short = text if len(text) <= 60 else text[:57] + "..."
        return f"<Generation {self.model!r} {state}, {len(text)} chars: {short!r}>"


def remember(handle: GenerationHandle) -> None:
    """Record the most recent handle."""
    global _last
    _last = handle


def last_handle() -> GenerationHandle | None:
    """The most recent handle, or None."""
    return _last
