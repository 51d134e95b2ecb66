"""A submitted request: its cancel flag, its event log and the blocking result."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..display import RichDisplay
from .errors import GenerationError
from .events import Event, Finished, Queued, Started, Stats, Token
from .request import Request

Listener = Callable[[Event], None]
log = logging.getLogger("mlx_notebook")


@dataclass
class Result(RichDisplay):
    """What `Job.result` gathers from the event stream.

    Attributes:
        text: The generated text (stop string excluded).
        finish_reason: ``"stop"``, ``"length"``, ``"cancelled"`` or ``"error"``.
        matched_stop: The stop string that ended generation, if any.
        error: Error text when ``finish_reason == "error"``.
        stats: Timing and size figures.
        token_ids: Every generated token id, in order.
        from_draft: For each token, whether it was an accepted draft token.
        reasoning: A thinking model's reasoning, apart from ``text``.
        schema: The request's `mlx_notebook.schema.Schema`, if it had one.
        records: Per-token records, when the request asked for ``logprobs``.
    """

    text: str
    finish_reason: str
    matched_stop: str | None
    error: str | None
    stats: Stats
    token_ids: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)
    reasoning: str = ""
    schema: object = field(default=None, repr=False, compare=False)
    records: list = field(default_factory=list, repr=False, compare=False)

    @property
    def tokens(self):
        """A `TokenTable` of every generated token (``Request(logprobs=k)``).

        Raises:
            ValueError: The request did not ask for ``logprobs``.
        """
        from .token_records import TokenTable

        if not self.records and self.token_ids:
            raise ValueError("tokens: ask for them with logprobs=K (0..20) or --logprobs K")
        return TokenTable(self.records)

    @property
    def perplexity(self) -> float:
        """Perplexity of the generated text (``exp`` of minus its mean logprob)."""
        return self.tokens.perplexity

    @property
    def value(self):
        """The parsed value of a structured generation (see `value_check.value_of`)."""
        from ..value_check import value_of

        return value_of(self.schema, self.text, self.finish_reason)

    @property
    def valid(self) -> bool:
        """Whether the structured value is complete and follows its schema.

        A bad schema document makes it False, never an exception (`value_check.check_value`).
        """
        from ..value_check import check_value

        return check_value(self.schema, self.text, self.finish_reason).valid

    @property
    def problem(self) -> str | None:
        """Why the value is not `valid`, in one line (None when it is)."""
        from ..value_check import check_value

        return check_value(self.schema, self.text, self.finish_reason).problem


class Job:
    """Handle for one request on a backend.

    Every consumer (`events`, `result`, listeners) reads the same append-only
    event log, so the blocking call and the live view see one execution path.

    The producer side is public so that any backend can drive a job: it calls
    `emit` for each event and ends with exactly one `Finished`.

    Args:
        request: What to generate.
        job_id: Identifier, unique within the backend.
        on_cancel: Called once, on the cancelling thread, when `cancel` is first
            called on an unfinished job (e.g. to drop it from a queue). Must not block.
    """

    def __init__(
        self, request: Request, job_id: int, on_cancel: Callable[[Job], None] | None = None
    ) -> None:
        self.request = request
        self.id = job_id
        self._cancel = threading.Event()
        self._end_thinking = threading.Event()
        self._cond = threading.Condition()
        # Serializes delivery to listeners, so a replay and live events arrive in order.
        self._deliver = threading.RLock()
        self._log: list[Event] = []
        self._listeners: list[Listener] = []
        self._failed: set[int] = set()  # ids of listeners already logged as failing
        self._on_cancel = on_cancel
        self._tokens = 0
        # What the backend's checks learned at submit, for its own worker (opaque here).
        self.checked = None
        # Called with the terminal event before it is in the log (the producer's own).
        self.on_finish: Callable[[Finished], None] | None = None

    # -- cancellation -------------------------------------------------------
    def cancel(self) -> None:
        """Ask the job to stop. Safe from any thread, idempotent, never blocks.

        A queued job is dropped; a running one stops at its next safe point.
        """
        if self._cancel.is_set() or self.done:
            return
        self._cancel.set()
        hook = self._on_cancel
        if hook is not None:
            hook(self)

    @property
    def cancelled(self) -> bool:
        """Whether `cancel` was called."""
        return self._cancel.is_set()

    def end_thinking(self) -> None:
        """Have a thinking model stop its reasoning and answer now. Safe from any thread.

        At its next step the model is given its end-of-thinking marker, so the
        answer starts there (`reasoning.EndThinking`). No effect on a model that
        does not think, or once its answer has started.
        """
        self._end_thinking.set()

    @property
    def thinking_ended(self) -> bool:
        """Whether `end_thinking` was called."""
        return self._end_thinking.is_set()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        """Leaving a ``with job:`` block cancels the job if it is still running."""
        self.cancel()

    # -- event log ----------------------------------------------------------
    def add_listener(self, fn: Listener, replay: bool = True) -> None:
        """Call ``fn(event)`` for each event, on the emitting (worker) thread.

        Keep it cheap: the worker waits for it. With ``replay`` it first gets the
        events emitted so far, on the caller's thread. A listener that raises is
        logged once with its traceback and keeps receiving events; nothing it
        raises (not even ``KeyboardInterrupt`` or ``SystemExit``) reaches the worker.
        """
        with self._deliver:
            with self._cond:
                past = list(self._log) if replay else []
                self._listeners.append(fn)
            for ev in past:
                self._call(fn, ev)

    def emit(self, event: Event) -> None:
        """Append ``event`` and deliver it to the listeners (producer side).

        After a `Finished` everything is ignored. Queue positions never increase:
        a stale `Queued` that lost a race with a newer one, or with `Started`, is
        dropped. ``on_finish`` sees the `Finished` before anyone can (the result
        cache stores it there, so a request made right after finds it).
        """
        hook = self.on_finish
        if hook is not None and isinstance(event, Finished) and not self.done:
            self.on_finish = None
            self._call(hook, event)
        with self._cond:
            if self._log and isinstance(self._log[-1], Finished):
                return  # exactly one terminal event
            if isinstance(event, Queued) and not self._fresh_position(event.position):
                return
            self._log.append(event)
            if isinstance(event, Token):
                self._tokens += 1
            listeners = list(self._listeners)
            self._cond.notify_all()
        if not listeners:
            return
        with self._deliver:
            for fn in listeners:
                self._call(fn, event)

    def _fresh_position(self, position: int) -> bool:
        for ev in reversed(self._log):
            if isinstance(ev, Started):
                return False
            if isinstance(ev, Queued):
                return position < ev.position
        return True

    def _call(self, fn: Listener, event: Event) -> None:
        try:
            fn(event)
        except BaseException:  # noqa: BLE001 - a listener must never end the producer
            if id(fn) not in self._failed:
                self._failed.add(id(fn))
                log.exception("mlx_notebook: listener %r of job %s failed", fn, self.id)

    @property
    def position(self) -> int | None:
        """Jobs ahead while queued (from the latest `Queued` event), else None."""
        last = self._log[-1] if self._log else None
        return last.position if isinstance(last, Queued) else None

    @property
    def token_count(self) -> int:
        """Tokens generated so far."""
        return self._tokens

    @property
    def done(self) -> bool:
        """Whether the terminal `Finished` event has been emitted."""
        log_ = self._log
        return bool(log_) and isinstance(log_[-1], Finished)

    @property
    def finished(self) -> Finished | None:
        """The terminal event, or None while the job is unfinished."""
        return self._log[-1] if self.done else None  # type: ignore[return-value]

    @property
    def text(self) -> str:
        """The text so far (the final text once done)."""
        fin = self.finished
        if fin is not None:
            return fin.text
        return "".join(e.text for e in list(self._log) if isinstance(e, Token))

    def events_so_far(self) -> list[Event]:
        """A copy of the event log as it stands (never waits)."""
        with self._cond:
            return list(self._log)

    def events(self, timeout: float | None = None, detach: bool = False) -> Iterator[Event]:
        """Iterate over all events from the first, ending with `Finished`.

        Each call has its own cursor, so several consumers may iterate at once.
        Leaving the loop early (``break``, an exception, closing the generator) or
        interrupting it with Ctrl-C cancels the job, unless ``detach`` is True.

        Args:
            timeout: Seconds to wait for the whole stream; None waits forever.
            detach: Let the job run on when the loop is left early.

        Raises:
            TimeoutError: When the job has not finished within ``timeout``; the
                job keeps running.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        i = 0
        complete = False
        try:
            while True:
                with self._cond:
                    while i >= len(self._log):
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            complete = True  # a timeout is not an abandonment
                            raise TimeoutError(f"job {self.id} did not finish in {timeout} s")
                        # A bounded wait keeps the main thread responsive to Ctrl-C.
                        self._cond.wait(0.1 if left is None else min(left, 0.1))
                    batch = self._log[i:]
                i += len(batch)
                for ev in batch:
                    if isinstance(ev, Finished):
                        complete = True
                    yield ev
                    if complete:
                        return
        finally:
            if not complete and not detach:
                self.cancel()

    def wait(self, timeout: float | None = None) -> Finished:
        """Block until the job ends; return its `Finished` event (never raises for errors)."""
        for ev in self.events(timeout):
            if isinstance(ev, Finished):
                return ev
        raise AssertionError("event stream ended without Finished")  # pragma: no cover

    def result(self, timeout: float | None = None, raise_on_error: bool = True) -> Result:
        """Block until the job ends and gather its events into a `Result`.

        On KeyboardInterrupt the job is cancelled and the producer is waited for,
        so the engine is idle again when the interrupt propagates.

        Args:
            timeout: Seconds to wait; None waits forever.
            raise_on_error: Raise `GenerationError` when the job ends in error.
                False returns the `Result` with ``finish_reason == "error"``.

        Raises:
            TimeoutError: When the job has not finished within ``timeout``.
            GenerationError: The job ended in error (carries the message and
                the partial text).
        """
        ids: list[int] = []
        drafts: list[bool] = []
        records: list = []
        try:
            for ev in self.events(timeout):
                if isinstance(ev, Token):
                    ids.append(ev.token_id)
                    drafts.append(ev.from_draft)
                    if ev.info is not None:
                        records.append(ev.info)
                elif isinstance(ev, Finished):
                    if raise_on_error and ev.finish_reason == "error":
                        raise GenerationError(ev.error or "error", ev.text, ev)
                    return Result(
                        ev.text,
                        ev.finish_reason,
                        ev.matched_stop,
                        ev.error,
                        ev.stats,
                        ids,
                        drafts,
                        ev.reasoning,
                        self.request.constraint if self.request.schema is not None else None,
                        records,
                    )
        except KeyboardInterrupt:
            self.cancel()
            self.settle()
            raise
        raise AssertionError("event stream ended without Finished")  # pragma: no cover

    def settle(self) -> None:
        """Wait until the job has ended, riding out further Ctrl-C presses.

        Meant for after `cancel`: the producer stops within one step.
        """
        while not self.done:
            try:
                with self._cond:
                    self._cond.wait(0.05)
            except KeyboardInterrupt:
                continue

    def __repr__(self) -> str:
        state = self.finished.finish_reason if self.done else "running/queued"
        return f"<Job {self.id} {self.request.mode} {state}>"
