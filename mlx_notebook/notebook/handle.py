"""Result handles bound by ``%%generate -o NAME`` and returned by `mlx_notebook.last`."""

from __future__ import annotations

from ..engine.events import Finished, Stats, Token
from ..engine.job import Job

_last: GenerationHandle | None = None


class GenerationHandle:
    """A live view of one generation's result.

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

    @property
    def text(self) -> str:
        """The text so far (final once `done`)."""
        return self._so_far("text")

    @property
    def reasoning(self) -> str:
        """A thinking model's reasoning so far, apart from `text` (empty for other models)."""
        return self._so_far("reasoning")

    @property
    def done(self) -> bool:
        """Whether generation has ended."""
        return self.job.done

    @property
    def finish_reason(self) -> str | None:
        """``stop``, ``length``, ``cancelled``, ``error``; None while running."""
        fin = self.job.finished
        return fin.finish_reason if fin else None

    @property
    def stats(self) -> Stats | None:
        """Timing figures once done."""
        fin = self.job.finished
        return fin.stats if fin else None

    @property
    def error(self) -> str | None:
        """Error text when ``finish_reason == "error"``."""
        fin = self.job.finished
        return fin.error if fin else None

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
        state = self.finish_reason or ("running" if self.job.position is None else "queued")
        text = self.text
        short = text if len(text) <= 60 else text[:57] + "..."
        return f"<Generation {self.model!r} {state}, {len(text)} chars: {short!r}>"


def remember(handle: GenerationHandle) -> None:
    """Record the most recent handle."""
    global _last
    _last = handle


def last_handle() -> GenerationHandle | None:
    """The most recent handle, or None."""
    return _last
