"""The Engine: one daemon worker thread that owns every piece of MLX state."""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..models.registry import LoadedModel, Registry
from ..models.spec import ModelNotFound
from .backend import EngineInfo, Unloaded
from .checks import check_request, require_same_vocab
from .diagnostics import describe_device, model_infos, status_notes, top2_margin
from .errors import EngineClosed, describe, detach_frames
from .events import Finished, Loading, Queued, Started
from .job import Job, Result
from .prompt_cache import ModelState
from .request import Request

log = logging.getLogger("mlx_notebook")
_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


class Engine:
    """Runs generation jobs on one worker thread, batching those that can share steps.

    A batch holds normal-decoding jobs on one model: they start as soon as a slot
    is free and decode together, one batched step per tick (see `batch.Batch`).
    The other jobs (speculative, opted out of batching, or on another model) run
    alone, one at a time, first come first served, and the batch takes a step at
    each of their cancel points, so neither starves.

    Args:
        registry: Loaded-model registry; a new one (LRU of ``max_loaded``) when None.
        max_loaded: Most models kept loaded when ``registry`` is None.
        start: Start the worker now. Tests pass False to inspect queued state.
        prompt_cache_bytes: Byte budget of each model's prompt caches; None: a
            quarter of the memory available when the model loads.
        max_batch: Most jobs decoded together; 0 or 1 runs every job alone, in
            submission order.
    """

    _default: Engine | None = None
    _default_lock = threading.Lock()

    def __init__(
        self,
        registry: Registry | None = None,
        max_loaded: int = 2,
        start: bool = True,
        prompt_cache_bytes: int | None = None,
        max_batch: int = 8,
    ) -> None:
        from .batch import Batch

        self.registry = registry or Registry(max_loaded=max_loaded)
        self.prompt_cache_bytes = prompt_cache_bytes
        # Prompt caches hold their model: drop them when the registry lets it go.
        self.registry.on_evict = self._forget
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._running: Job | None = None
        self._closed = False
        self._death: str | None = None
        self._ids = itertools.count(1)
        self._state: dict[str, ModelState] = {}
        self._device = "unknown"
        self._batch = Batch(max(1, max_batch), self._state_for)
        self._keys: dict[int, str] = {}  # queued job id -> registry name of its model
        self._admitting: list[Job] = []
        self.max_batch = max_batch
        self._thread = threading.Thread(target=self._loop, name="mlx-worker", daemon=True)
        _engines.add(self)
        if start:
            self.start()

    @classmethod
    def default(cls) -> Engine:
        """The process-wide engine, created on first use (and again if it was closed)."""
        with cls._default_lock:
            if cls._default is None or cls._default.closed:
                cls._default = cls()
            return cls._default

    # -- public API ---------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread (once)."""
        if not self._thread.is_alive() and not self._closed:
            self._thread.start()

    def check(self, request: Request) -> None:
        """Validate ``request`` as `submit` would, without queuing anything.

        Models already loaded are checked in full (context window, ``top_k``,
        draft vocabulary, chat template); others are checked on the worker before
        prefill.

        Raises:
            ValueError: A field is invalid (the message names it), the prompt does
                not fit the context window, the draft's vocabulary differs, or a
                conversation's model has no chat template.
        """
        check_request(request, self.registry)

    def submit(self, request: Request) -> Job:
        """Validate ``request`` on the caller's thread and queue it.

        Raises:
            ValueError: See `check`; nothing is queued.
            EngineClosed: The engine is closed.
        """
        self.check(request)
        key = self._key(request)  # which batch it can join, resolved off the worker
        with self._cond:
            if self._closed:
                raise EngineClosed(self._closed_reason())
            job = Job(request, next(self._ids), on_cancel=self._drop_queued)
            self._keys[job.id] = key
            ahead = len(self._queue) + (self._running is not None)
            self._queue.append(job)
            job.emit(Queued(ahead, self._busy_with()))  # no listeners yet: nothing runs here
            self._cond.notify_all()
        return job

    def generate(self, prompt, **fields) -> Result:
        """Blocking convenience: ``submit(Request(prompt, **fields)).result()``."""
        return self.submit(Request(prompt, **fields)).result()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the worker thread at its next safe point; return its Future.

        Safe points are between jobs and at the running job's cancel points
        (between decode steps and prefill chunks), so a call waits at most one
        step. Cancelling the Future before it starts means ``fn`` never runs.

        Raises:
            EngineClosed: The engine is closed.
        """
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise EngineClosed(self._closed_reason())
            self._calls.append((fn, fut))
            self._cond.notify_all()
        return fut

    def run_on_worker(self, fn: Callable[[], Any], timeout: float | None = 30.0) -> Any:
        """`call` ``fn`` and wait for its result, for at most ``timeout`` seconds.

        If the wait times out or is interrupted, the call is withdrawn: it does not
        run later.

        Raises:
            RuntimeError: Called on the worker thread itself (e.g. from a listener),
                where waiting would deadlock.
            TimeoutError: The worker did not finish ``fn`` in time.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "this engine call blocks, and it was made on the engine's own worker "
                "thread (from a job listener?), where it would wait forever"
            )
        fut = self.call(fn)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            withdrawn = fut.cancel()
            raise TimeoutError(
                f"the engine's worker did not finish within {timeout} s"
                + ("; the call was withdrawn" if withdrawn else "")
            ) from None
        except KeyboardInterrupt:
            fut.cancel()
            raise

    def cancel_all(self) -> int:
        """Cancel every queued and running job; return how many were cancelled."""
        jobs = self._jobs()
        for j in jobs:
            j.cancel()
        return len(jobs)

    def unload(self, spec: str | None = None, timeout: float = 5.0) -> Unloaded:
        """Unload one model (or all when None), cancelling the jobs that use it.

        Returns within about one decode step: the cancelled jobs stop at their next
        safe point, and the unload runs there.

        Raises:
            RuntimeError: Called from the worker thread (a job listener).
            TimeoutError: The worker did not get to it within ``timeout``; nothing
                was unloaded and nothing will be.
        """
        if spec is not None and not self.registry.loaded(spec):
            return Unloaded()
        if threading.current_thread() is self._thread:
            self.run_on_worker(lambda: None)  # raises the clear RuntimeError
        key = None if spec is None else self.registry.key_for(spec)
        victims = [j for j in self._jobs() if key is None or key in self._models_of(j)]
        for j in victims:
            j.cancel()
        names = self.run_on_worker(lambda: self.registry.unload(key), timeout)
        return Unloaded(names, [j.id for j in victims])

    def register_model(self, name: str, model, tokenizer) -> None:
        """Make an already built model available under ``name`` (built on the worker)."""
        self.run_on_worker(lambda: self.registry.register(name, model, tokenizer))

    def forget_history(self, spec: str | None = None, timeout: float = 5.0) -> None:
        """Clear the suffix index of earlier prompts and outputs (one model, or all).

        Suffix drafting then proposes only from each job's own text until new jobs
        have run.
        """

        def clear() -> None:
            from .suffix import SuffixIndex

            key = None if spec is None else self.registry.key_for(spec)
            for name, state in self._state.items():
                if key is None or name == key:
                    state.suffix = SuffixIndex(state.suffix.max_tokens)

        self.run_on_worker(clear, timeout)

    def set_prompt_cache_bytes(self, n: int | None) -> None:
        """Change every model's prompt-cache budget (None: the default)."""
        from .prompt_cache import default_budget

        self.prompt_cache_bytes = n
        for state in list(self._state.values()):
            state.cache.resize(default_budget() if n is None else n)

    def logit_margin(self, request: Request, generated: list[int], timeout: float = 60) -> float:
        """Top-2 logit gap of ``request.model`` after the prompt and ``generated`` tokens."""
        return self.run_on_worker(
            lambda: top2_margin(self.registry.get(request.model), request, generated), timeout
        )

    def info(self) -> EngineInfo:
        """Device, worker state, queue, loaded models, acceleration and prompt caches."""
        from .. import _blas

        with self._cond:
            running = self._running
            queued = len(self._queue)
        notes = status_notes(_blas.status(), self._state)
        rows = list(self._batch.rows)
        if self._max_batch <= 1:
            notes.insert(0, "batching: off (max_batch <= 1): jobs run one at a time")
        else:
            on = f" on {self._batch.model_name}" if rows else ""
            notes.insert(
                0,
                f"batch: {len(rows)} of {self._max_batch} rows{on}"
                + (f" (jobs {', '.join(str(r.job.id) for r in rows)})" if rows else ""),
            )
        models = model_infos(self.registry)
        return EngineInfo(
            kind="local",
            device=self._device,
            worker_alive=self._thread.is_alive(),
            running=None if running is None else running.id,
            queued=queued,
            batched=tuple(r.job.id for r in rows),
            models=models,
            notes=tuple(notes),
            closed=self._closed_reason() if self._closed else None,
        )

    def close(self, timeout: float | None = 10.0) -> None:
        """Cancel everything, stop the worker and wait for it (never under our lock)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.cancel_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        """Whether the engine was closed or its worker died."""
        return self._closed

    @property
    def max_batch(self) -> int:
        """Most jobs decoded together (0 or 1: every job runs alone)."""
        return self._max_batch

    @max_batch.setter
    def max_batch(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"max_batch: must be an integer >= 0 (got {n!r})")
        self._max_batch = n
        self._batch.max_rows = max(1, n)  # rows already admitted finish as they are
        with self._cond:
            self._cond.notify_all()

    # -- internals ----------------------------------------------------------
    def _closed_reason(self) -> str:
        return (
            f"engine is closed: its worker died ({self._death})"
            if self._death
            else ("engine is closed")
        )

    def _jobs(self) -> list[Job]:
        with self._cond:
            running = [self._running] if self._running else []
            return list(self._queue) + running + self._admitting + self._batch.jobs

    def _models_of(self, job: Job) -> set[str]:
        r = job.request
        specs = [r.model] + ([r.draft] if r.mode == "draft" else [])
        return {self.registry.key_for(s) for s in specs}

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
        r, b = self._running, self._batch
        parts = [] if r is None else [f"job {r.id} on {r.request.model}"]
        rows = len(b.rows) + admitted
        if self._max_batch > 1 and rows >= b.max_rows:
            parts.append(f"a batch slot ({rows} of {b.max_rows} in use)")
        return " and ".join(parts)

    def _batchable(self, job: Job) -> bool:
        r = job.request
        return self._max_batch > 1 and r.batch and r.mode == "normal"

    def _admit(self, solo_allowed: bool) -> Job | None:
        """Move jobs from the queue into the batch; pop the next job to run alone.

        Worker thread only. Returns the job to run alone (when ``solo_allowed``
        and nothing runs alone now), else None.
        """
        with self._cond:
            if not self._queue:
                return None
            take, solo, model = [], None, self._batch.model_name
            for job in self._queue:
                if self._batchable(job):
                    key = self._keys.get(job.id)
                    if model is None or key == model:
                        if len(take) < self._batch.room:
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

    def _key(self, request: Request) -> str:
        try:
            return self.registry.key_for(request.model)
        except Exception:  # noqa: BLE001 - an unresolvable spec fails when loaded
            return request.model

    def _start_row(self, job: Job) -> None:
        if job.cancelled:
            job.emit(Finished("", "cancelled"))
            return
        job.emit(Started())
        try:
            main = self._load(job, job.request.model, pin=self._batch.model_name)
        except BaseException as exc:  # noqa: BLE001 - loading errors end the job, not the worker
            job.emit(Finished("", "error", None, describe(exc), exception=detach_frames(exc)))
            return
        self._batch.admit(job, main)

    def _between(self) -> None:
        """A job running alone is at a cancel point: calls, admissions, one batch tick."""
        self._service_calls()
        self._admit(solo_allowed=False)
        if self._batch:
            self._batch.tick()

    def _forget(self, name: str) -> None:
        self._state.pop(name, None)

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
            import mlx.core as mx
            from mlx_lm.generate import generation_stream

            self._device = describe_device(mx)
            while True:
                with self._cond:
                    while not (self._queue or self._calls or self._closed or self._batch):
                        self._cond.wait()
                    if self._closed and not self._calls:
                        break
                self._service_calls()
                with mx.stream(generation_stream):
                    solo = self._admit(solo_allowed=True)
                    if solo is not None:
                        self._run(solo, generation_stream)
                        with self._cond:
                            self._running = None
                    elif self._batch:
                        self._batch.tick()
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
            self._batch.fail_all("cancelled")
        else:
            self._batch.fail_all("error", f"the engine's worker died: {describe(death)}", death)
        for j in jobs:
            if death is None:
                j.emit(Finished(j.text, "cancelled"))
            else:
                msg = f"the engine's worker died: {self._death}"
                j.emit(Finished(j.text, "error", error=msg, exception=death))
        for _, fut in calls:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(EngineClosed(self._closed_reason()))
        try:
            self.registry.clear()
            self._state.clear()
            import mlx.core as mx

            if hasattr(mx, "clear_streams"):
                mx.clear_streams()
        except Exception:  # noqa: BLE001 - best effort on the way out
            log.debug("mlx_notebook: cleanup after the worker stopped failed", exc_info=True)

    def _run(self, job: Job, stream) -> None:
        if job.cancelled:
            job.emit(Finished("", "cancelled"))
            return
        import mlx.core as mx
        from mlx_lm.generate import wired_limit

        from .runner import run_job

        job.emit(Started())
        try:
            # Everything, loading and prefill included, on mlx-lm's generation stream.
            with mx.stream(stream):
                main = self._load(job, job.request.model)
                draft = None
                if job.request.mode == "draft":
                    draft = self._load(job, job.request.draft, pin=main.name, draft=True)
                    require_same_vocab(main, draft)
                with wired_limit(main.model, [stream]):  # raises the limit on Metal only
                    final = run_job(job, main, draft, self._state_for, stream, self._between)
        except BaseException as exc:  # noqa: BLE001 - loading errors end the job, not the worker
            final = Finished("", "error", None, describe(exc), exception=detach_frames(exc))
        job.emit(final)

    def _load(self, job: Job, spec: str, pin: str | None = None, draft: bool = False):
        if not self.registry.loaded(spec):
            job.emit(Loading(spec))
        try:
            return self.registry.get(spec, pin=pin)
        except ModelNotFound as exc:
            raise exc.for_flag("--draft" if draft else "-m") from None
        except (OSError, ValueError) as exc:
            if not draft:
                raise
            # Say which option named the model that failed.
            raise type(exc)(f"draft (--draft): {str(exc).removeprefix('model: ')}") from None

    def _state_for(self, loaded: LoadedModel) -> ModelState:
        from .prompt_cache import PromptCache

        if self.registry.peek(loaded.name) is not loaded:
            return ModelState()  # unloaded while the job ran: keep nothing for it
        state = self._state.get(loaded.name)
        if state is None:
            state = self._state[loaded.name] = ModelState(PromptCache(self.prompt_cache_bytes))
        return state


def _emit_all(moves: list[tuple[Job, Queued]]) -> None:
    for job, ev in moves:
        job.emit(ev)


def _close_all() -> None:
    # Every engine, not only the default: a worker mid-computation while the
    # interpreter finalizes aborts the process ("terminate called ...").
    for eng in list(_engines):
        eng.close(timeout=10.0)


atexit.register(_close_all)
