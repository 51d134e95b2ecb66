"""A planned series of runs on one backend: submitted together, run in order, stopped together."""

from __future__ import annotations

import threading
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
            _wait_all(self.jobs, deadline)
        except KeyboardInterrupt:
            _stop_all(self)
            raise


def _wait_all(jobs, deadline: float | None) -> None:
    """Wait for each job in turn, all within ``deadline`` (a `time.monotonic` value)."""
    for j in list(jobs):
        j.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _stop_all(runs) -> None:
    """After Ctrl-C: cancel every run and wait until each has really ended."""
    runs.cancel()
    for j in list(runs.jobs):
        j.settle()


def timed_spec(request: Request) -> Request:
    """What a measured run submits: alone, from scratch, untaught, uncached, greedy unless set.

    Measured runs are never batched with each other, prefill from scratch, teach no
    session index and never come from the result cache (a replay takes no time). A
    temperature left unset means greedy here, not the model's sampling defaults: greedy
    texts can be checked identical between normal and speculative decoding. An
    explicit temperature is measured as given.
    """
    from dataclasses import replace

    temperature = 0.0 if request.temperature is None else request.temperature
    return replace(
        request, reuse_cache=False, remember=False, batch=False, temperature=temperature,
        cache="off",
    )  # fmt: skip


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


class PacedRuns:
    """Runs submitted round by round; after each round, ``next_round()`` picks the next.

    The first round is checked and submitted by `start` on the caller's thread
    (a bad request raises there, with nothing submitted); later rounds are
    submitted by a small pacing thread that waits for each round to end. Pacing
    stops when ``next_round`` returns None, when a run ends cancelled or in
    error (Stop, ■, a failure), or on `cancel`.

    Args:
        backend: Anything with ``check(request)`` and ``submit(request) -> Job``.
        first: The first round's requests.
        next_round: Called on the pacing thread after each round: the next
            round's requests, or None to end.
        on_submit: Called with each new job and its index, as it is submitted.
        on_end: Called once on the pacing thread when pacing has ended.
    """

    def __init__(self, backend, first, next_round, on_submit=None, on_end=None) -> None:
        self.backend = backend
        self.requests: list[Request] = []
        self.jobs: list[Job] = []
        self._first = list(first)
        self._next_round = next_round
        self.on_submit = on_submit
        self.on_end = on_end
        self._cancelled = False
        self._thread = None
        self._ended = False
        self._lock = threading.Lock()  # a subscriber sees each job once, in order
        self._subscribers: list[tuple] = []

    def start(self) -> PacedRuns:
        """Check and submit the first round, then pace the rest on a thread.

        Raises:
            ValueError: A request of the first round is invalid; nothing was submitted.
        """
        for r in self._first:
            self.backend.check(r)
        self._submit(self._first)
        self._thread = threading.Thread(target=self._pace, name="mlxnb-pace", daemon=True)
        self._thread.start()
        return self

    def subscribe(self, on_submit, on_end) -> None:
        """Follow the runs from now on: for a view shown after they began.

        ``on_submit(job, index)`` is called for every job (those so far at once, then
        each new one) and ``on_end()`` once pacing has ended (at once if it has).
        """
        with self._lock:
            for i, job in enumerate(self.jobs):
                on_submit(job, i)
            ended = self._ended
            if not ended:
                self._subscribers.append((on_submit, on_end))
        if ended:
            on_end()

    def _submit(self, requests) -> list[Job]:
        jobs = []
        for r in requests:
            job = self.backend.submit(r)
            with self._lock:
                self.requests.append(r)
                self.jobs.append(job)
                jobs.append(job)
                if self._cancelled:  # cancel() ran while this was being submitted
                    job.cancel()
                i = len(self.jobs) - 1
                for hook in [self.on_submit] + [s for s, _ in self._subscribers]:
                    if hook is not None:
                        hook(job, i)
        return jobs

    def _pace(self) -> None:
        round_jobs = list(self.jobs)
        try:
            while True:
                for j in round_jobs:
                    j.wait()
                if self._cancelled or any(
                    j.finished.finish_reason in ("cancelled", "error") for j in round_jobs
                ):
                    return
                nxt = self._next_round()
                if not nxt or self._cancelled:
                    return
                try:
                    round_jobs = self._submit(nxt)
                except Exception:  # the engine closed, say: what ran is kept
                    return
        finally:
            with self._lock:
                self._ended = True
                ends = [self.on_end] + [e for _, e in self._subscribers]
            for end in ends:
                if end is not None:
                    end()

    def results(self) -> list[Result | None]:
        """One entry per submitted run: its `Result` once finished, else None."""
        return [j.result(raise_on_error=False) if j.done else None for j in self.jobs]

    @property
    def done(self) -> bool:
        """Whether pacing has ended and every run has ended."""
        return self._ended and all(j.done for j in self.jobs)

    def cancel(self) -> None:
        """Submit nothing more and stop every run; finished ones are kept."""
        self._cancelled = True
        for j in list(self.jobs):
            j.cancel()

    def wait(self, timeout: float | None = None) -> None:
        """Block until pacing and every run have ended. Ctrl-C stops them and re-raises.

        Raises:
            TimeoutError: Not done within ``timeout`` (the runs go on).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # Short joins: a simulated interrupt (ipykernel, _thread.interrupt_main) is
            # only seen between them.
            while self._thread is not None and self._thread.is_alive():
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("the measurement has not finished yet")
                self._thread.join(0.05)
            _wait_all(self.jobs, deadline)
        except KeyboardInterrupt:
            _stop_all(self)
            if self._thread is not None:
                self._thread.join()
            raise
