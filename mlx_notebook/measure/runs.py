"""A planned series of runs on one backend: submitted together, run in order, stopped together."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..engine.job import Job, Result
from ..engine.request import Request


class RunSet:
    """Submits ``requests`` in order (the backend runs them FIFO) and gathers results.

    Every request is checked before any is submitted, so a bad one leaves no job
    behind.

    Args:
        backend: Anything with ``check(request)`` and ``submit(request) -> Job``
            (and optionally ``submit_many(requests, label)``, which queues them together).
        requests: The runs, in the order they should run.
        label: Names a bad request's position in the error (``"row"``: ``row 3: ...``).
    """

    def __init__(self, backend, requests: Sequence[Request], label: str | None = None) -> None:
        self.backend = backend
        self.requests = list(requests)
        self.label = label
        self.jobs: list[Job] = []

    def start(self) -> RunSet:
        """Check every request, then submit them all.

        Raises:
            ValueError: A request is invalid; nothing was submitted.
        """
        many = getattr(self.backend, "submit_many", None)
        if many is not None:  # checks them all, then queues them together
            self.jobs = many(self.requests, self.label)
            return self
        for i, r in enumerate(self.requests):
            try:
                self.backend.check(r)
            except ValueError as exc:
                if self.label is None:
                    raise
                raise ValueError(f"{self.label} {i}: {exc}") from None
        try:
            for r in self.requests:
                self.jobs.append(self.backend.submit(r))
        except BaseException:
            self.cancel()
            raise
        return self

    def results(self) -> list[Result | None]:
        """One entry per request: its `Result` once finished, else None."""
        return [j.result(raise_on_error=False) if j.done else None for j in self.jobs] + [None] * (
            len(self.requests) - len(self.jobs)
        )

    @property
    def done(self) -> bool:
        """Whether every run has ended."""
        return len(self.jobs) == len(self.requests) and all(j.done for j in self.jobs)

    def cancel(self) -> None:
        """Stop every run that has not ended; finished ones are kept."""
        for j in self.jobs:
            j.cancel()

    def wait(self, timeout: float | None = None) -> None:
        """Block until every run has ended. Ctrl-C stops them all, waits, and re-raises.

        Raises:
            TimeoutError: Not done within ``timeout`` (the runs go on).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for j in self.jobs:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                j.wait(left)
        except KeyboardInterrupt:
            self.cancel()
            for j in self.jobs:
                j.settle()
            raise


def measured_request(prompt, model: str, draft: str | None, backend, **fields):
    """The backend and `Request` a `compare()` or `sweep()` call measures.

    ``backend=None`` routes ``model`` (a local spec or a server URL); without a
    draft model or ``draft_kind``, drafts come from prompt lookup.
    """
    if backend is None:
        from ..engine.backend import backend_for

        route = backend_for(model)
        backend, model = route.backend, route.model
    if draft is None and fields.get("draft_kind", "none") == "none":
        draft = "lookup"
    return backend, Request(prompt, model=model, draft=draft, **fields)
