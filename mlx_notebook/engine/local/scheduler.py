"""The `Scheduler`: the queue, the worker thread, and which job runs when.

Each turn of the loop runs the calls waiting at this safe point, admits queued
jobs that can join the batch (normal decoding on the batch's model, while slots
are free), and then either starts the next job that must run alone or, with
none waiting, advances the batch by one tick. A job running alone calls back at
each of its cancel points, where the calls, admissions and one batch tick run
too, so batched rows and the job alone take turns step by step.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ...models.registry import LoadedModel, Registry
from ...models.spec import ModelNotFound
from ..decoding.device import governor, release_freed
from ..errors import EngineClosed, describe
from ..events import ENGINE, Finished, Loading, Notice, Queued, Started
from ..job import Job
from ..replay.results import Replays
from ..request import Request
from .checks import Checked, require_same_vocab
from .diagnostics import describe_device
from .startup import NoBatch, import_mlx

log = logging.getLogger("mlx_notebook")


class Scheduler:
    """The queue of jobs and calls, and the worker thread that runs them.

    The `Engine` owns one: the engine checks requests on the caller's thread and
    hands them over with `enqueue`; everything else here runs on the worker or
    under the lock.

    Args:
        registry: The engine's loaded models (loaded on the worker).
        max_batch: Most jobs decoded together; 0 or 1 runs every job alone.
        prompt_cache_bytes: Byte budget of each model's prompt caches (None: default).
    """

    def __init__(
        self,
        registry: Registry,
        max_batch: int,
        prompt_cache_bytes: int | None,
        replays: Replays | None = None,
    ):
        self.registry = registry
        self.replays = replays  # the result cache (None: off)
        self.prompt_cache_bytes = prompt_cache_bytes
        self.states: dict = {}  # model name -> its ModelState (caches and suffix index)
        self.device = "unknown"
        # The real batch needs MLX, which the worker imports: none before (the first cell
        # returns at once, its view saying the engine is loading).
        self.batch = NoBatch(1)  # sized by max_batch below
        self._ready = False  # the worker has imported MLX
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._running: Job | None = None
        self._closed = False
        self._death: str | None = None
        self._ids = itertools.count(1)
        self._keys: dict[int, str] = {}  # queued job id -> registry name of its model
        self._alone: dict[int, str] = {}  # started job id -> why it must run alone
        self._admitting: list[Job] = []
        self.max_batch = max_batch
        self.thread = threading.Thread(target=self._loop, name="mlx-worker", daemon=True)

    # -- the caller's side (any thread) -------------------------------------
    @property
    def max_batch(self) -> int:
        """Most jobs decoded together (0 or 1: every job runs alone)."""
        return self._max_batch

    @max_batch.setter
    def max_batch(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"max_batch: must be an integer >= 0 (got {n!r})")
        self._max_batch = n
        self.batch.max_rows = max(1, n)  # rows already admitted finish as they are
        with self._cond:
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """Whether `close` was called or the worker died."""
        return self._closed

    def closed_reason(self) -> str:
        """Why new work is refused."""
        if self._death:
            return f"engine is closed: its worker died ({self._death})"
        return "engine is closed"

    def enqueue(self, checked: list[tuple[Request, Checked]]) -> list[Job]:
        """Queue checked requests together, in order; return their jobs.

        Raises:
            EngineClosed: The engine is closed.
        """
        with self._cond:
            if self._closed:
                raise EngineClosed(self.closed_reason())
            jobs = []
            for request, check in checked:
                job = Job(request, next(self._ids), on_cancel=self._drop_queued)
                job.checked = check
                self._keys[job.id] = check.key
                ahead = len(self._queue) + (self._running is not None)
                self._queue.append(job)
                job.emit(Queued(ahead, self._busy_with()))  # no listeners yet
                if not self._ready:
                    job.emit(Loading(ENGINE))
                jobs.append(job)
            self._cond.notify_all()
        return jobs

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the worker at its next safe point; return its Future.

        Raises:
            EngineClosed: The engine is closed.
        """
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise EngineClosed(self.closed_reason())
            self._calls.append((fn, fut))
            self._cond.notify_all()
        return fut

    def jobs(self) -> list[Job]:
        """Every queued, admitted and running job."""
        with self._cond:
            running = [self._running] if self._running else []
            jobs = list(self._queue) + running + self._admitting + list(self.batch.jobs)
        # A job being admitted is in the batch already, or back in the queue to run alone.
        return list(dict.fromkeys(jobs))

    def counts(self) -> tuple[Job | None, int]:
        """The job running alone (or None) and how many wait in the queue."""
        with self._cond:
            return self._running, len(self._queue)

    def close(self) -> None:
        """Refuse new work and let the worker finish (the caller cancels the jobs)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def forget(self, name: str) -> None:
        """Drop a model's caches (the registry let it go)."""
        self.states.pop(name, None)

    # -- the worker's side ---------------------------------------------------
    def _drop_queued(self, job: Job) -> None:
        with self._cond:
            try:
                self._queue.remove(job)
            except ValueError:
                return  # running or done: the worker sees the flag
            self._keys.pop(job.id, None)
            moves = self._renumber()
        job.emit(Finished("", "cancelled"))
        _emit_all(moves)

    def _renumber(self, admitted: int = 0) -> list[tuple[Job, Queued]]:
        # Called with the lock held; the caller emits after releasing it, since
        # listeners may call back into the engine. Jobs drop stale positions.
        base = self._running is not None
        busy = self._busy_with(admitted)
        return [
            (j, Queued(base + i, busy)) for i, j in enumerate(self._queue) if j.position != base + i
        ]

    def _busy_with(self, admitted: int = 0) -> str:
        # Called with the lock held; ``admitted`` rows are about to join the batch.
        r, b = self._running, self.batch
        parts = [] if r is None else [f"job {r.id} on {r.request.model}"]
        rows = len(b.rows) + admitted
        if self._max_batch > 1 and rows >= b.max_rows:
            parts.append(f"a batch slot ({rows} of {b.max_rows} in use)")
        return " and ".join(parts)

    def _batchable(self, job: Job) -> bool:
        r = job.request
        return self._max_batch > 1 and r.batch and r.mode == "normal" and job.id not in self._alone

    def _admit(self, solo_allowed: bool) -> Job | None:
        """Move jobs from the queue into the batch; pop the next job to run alone.

        Worker thread only. Returns the job to run alone (when ``solo_allowed``
        and nothing runs alone now), else None.
        """
        with self._cond:
            if not self._queue:
                return None
            take, solo, model = [], None, self.batch.model_name
            for job in self._queue:
                if self._batchable(job):
                    key = self._keys.get(job.id)
                    if model is None or key == model:
                        if len(take) < self.batch.room:
                            model = model or key
                            take.append(job)
                        continue  # waits for a slot in the batch
                if solo is None and solo_allowed and self._running is None:
                    solo = job  # first come, first served among jobs run alone
            for job in take + ([solo] if solo else []):
                self._queue.remove(job)
                self._keys.pop(job.id, None)
            if solo is not None:
                self._running = solo
            self._admitting = take  # still findable by cancel_all while models load
            moves = self._renumber(len(take)) if take or solo else []
        _emit_all(moves)
        try:
            for job in take:
                self._start_row(job)
        finally:
            with self._cond:
                self._admitting = []
        return solo

    def _begin(self, job: Job) -> bool:
        """A job leaves the queue: end it if it was cancelled meanwhile, else start it."""
        if job.cancelled:
            self._alone.pop(job.id, None)
            job.emit(Finished("", "cancelled"))
            return False
        if self._alone.pop(job.id, None) is None:  # a job sent back to run alone has started
            job.emit(Started())
            replays = self.replays
            if replays is not None:  # its result is kept as it ends, on either path
                job.on_finish = lambda fin: replays.keep(job, fin)
        return True

    def _start_row(self, job: Job) -> None:
        if not self._begin(job):
            return
        try:
            main = self._load(job, job.checked.key, pin=self.batch.model_name)
        except BaseException as exc:  # noqa: BLE001 - loading errors end the job, not the worker
            job.emit(Finished.failed(exc))
            return
        why = self.batch.admit(job, main)
        if why is not None:  # its model cannot batch: first in line to run alone
            job.emit(Notice(why))
            with self._cond:
                self._alone[job.id] = why
                self._keys[job.id] = main.name
                self._queue.appendleft(job)

    def _between(self) -> None:
        """A job running alone is at a cancel point: calls, admissions, one batch tick."""
        self._service_calls()
        self._admit(solo_allowed=False)
        if self.batch:
            self.batch.tick()

    def _service_calls(self) -> None:
        """Run the pending calls (worker thread only, at a safe point)."""
        while True:
            with self._cond:
                if not self._calls:
                    return
                fn, fut = self._calls.popleft()
            if fut.set_running_or_notify_cancel():  # False: its caller gave up
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    fut.set_exception(exc)

    def _loop(self) -> None:
        death: BaseException | None = None
        try:
            mx, generation_stream, Batch = import_mlx()
            self.device = describe_device(mx)
            with self._cond:
                self.batch = Batch(self.batch.max_rows, self._state_for, self.replays)
                self._ready = True
            while True:
                if not (self._queue or self._calls or self._closed or self.batch):  # unlocked:
                    release_freed()  # idle, what the last job freed goes back (a hint only)
                with self._cond:
                    while not (self._queue or self._calls or self._closed or self.batch):
                        governor().reset()  # idle time is not a step
                        self._cond.wait()
                    if self._closed and not self._calls:
                        break
                self._service_calls()
                # Everything, loading and prefill included, on mlx-lm's generation stream.
                with mx.stream(generation_stream):
                    solo = self._admit(solo_allowed=True)
                    if solo is not None:
                        self._run(solo, generation_stream)
                        with self._cond:
                            self._running = None
                    elif self.batch:
                        self.batch.tick()
        except BaseException as exc:  # noqa: BLE001 - recorded; every job still ends
            death = exc
            log.exception("mlx_notebook: the engine's worker died")
        finally:
            self._shutdown(death)

    def _shutdown(self, death: BaseException | None) -> None:
        with self._cond:
            self._closed = True
            if death is not None:
                self._death = describe(death)
            jobs = ([self._running] if self._running else []) + list(self._queue)
            self._running, self._queue = None, deque()
            calls, self._calls = list(self._calls), deque()
        if death is None:
            self.batch.fail_all("cancelled")
        else:
            self.batch.fail_all("error", f"the engine's worker died: {describe(death)}", death)
        for j in jobs:
            if death is None:
                j.emit(Finished(j.text, "cancelled"))
            else:
                msg = f"the engine's worker died: {self._death}"
                j.emit(Finished(j.text, "error", error=msg, exception=death))
        for _, fut in calls:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(EngineClosed(self.closed_reason()))
        try:
            self.registry.clear()
            self.states.clear()
            import mlx.core as mx

            if hasattr(mx, "clear_streams"):
                mx.clear_streams()
        except Exception:  # noqa: BLE001 - best effort on the way out
            log.debug("mlx_notebook: cleanup after the worker stopped failed", exc_info=True)

    def _run(self, job: Job, stream) -> None:
        """Run ``job`` alone (the loop has made ``stream`` the default stream)."""
        if not self._begin(job):
            return
        from mlx_lm.generate import wired_limit

        from .runner import run_job

        try:
            main = self._load(job, job.checked.key)
            draft = None
            if job.request.mode == "draft":
                draft = self._load(job, job.checked.draft_key, pin=main.name, draft=True)
                require_same_vocab(main, draft)
            with wired_limit(main.model, [stream]):  # raises the limit on Metal only
                alone = lambda: not getattr(self.batch, "decoding", None)  # noqa: E731
                final = run_job(job, main, draft, self._state_for, stream, self._between,
                                self.replays, alone=alone)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - loading errors end the job, not the worker
            final = Finished.failed(exc)
        job.emit(final)

    def _load(self, job: Job, key: str, pin: str | None = None, draft: bool = False):
        # ``key`` was resolved at submit (`Checked`): a loaded model is found by name.
        if self.registry.peek(key) is None:
            job.emit(Loading(job.request.draft if draft else job.request.model))
        try:
            return self.registry.get(key, pin=pin, canonical=True)
        except ModelNotFound as exc:
            raise exc.for_flag("--draft" if draft else "-m") from None
        except (OSError, ValueError) as exc:
            if not draft:
                raise
            # Say which option named the model that failed.
            raise type(exc)(f"draft (--draft): {str(exc).removeprefix('model: ')}") from None

    def _state_for(self, loaded: LoadedModel):
        from ..cache.prompt_cache import ModelState, PromptCache

        if self.registry.peek(loaded.name) is not loaded:
            return ModelState()  # unloaded while the job ran: keep nothing for it
        state = self.states.get(loaded.name)
        if state is None:
            disk = self.replays.prompts_for(loaded) if self.replays is not None else None
            cache = PromptCache(self.prompt_cache_bytes, disk=disk)
            state = self.states[loaded.name] = ModelState(cache)
        return state


def _emit_all(moves: list[tuple[Job, Queued]]) -> None:
    for job, ev in moves:
        job.emit(ev)
