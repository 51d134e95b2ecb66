"""The Engine: one daemon worker thread that owns every piece of MLX state."""

from __future__ import annotations

import atexit
import itertools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..models.registry import LoadedModel, Registry
from ..models.vocab import spec_fingerprint
from .errors import IncompatibleDraft
from .events import Finished, Queued, Started
from .job import Job, Result
from .prompt_cache import PromptCache
from .request import Request
from .runner import run_job


class Engine:
    """Runs generation jobs FIFO on one worker thread.

    Args:
        registry: Loaded-model registry; a new one (LRU of ``max_loaded``) when None.
        max_loaded: Most models kept loaded when ``registry`` is None.
        start: Start the worker now. Tests pass False to inspect queued state.
    """

    _default: Engine | None = None
    _default_lock = threading.Lock()

    def __init__(
        self, registry: Registry | None = None, max_loaded: int = 2, start: bool = True
    ) -> None:
        self.registry = registry or Registry(max_loaded=max_loaded)
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._running: Job | None = None
        self._closed = False
        self._ids = itertools.count(1)
        self._caches: dict[str, PromptCache] = {}
        self._device = "unknown"
        self._thread = threading.Thread(target=self._loop, name="mlx-worker", daemon=True)
        if start:
            self.start()

    @classmethod
    def default(cls) -> Engine:
        """The process-wide engine, created on first use."""
        with cls._default_lock:
            if cls._default is None or cls._default._closed:
                cls._default = cls()
                atexit.register(cls._default.close)
            return cls._default

    # -- public API ---------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread (once)."""
        if not self._thread.is_alive():
            self._thread.start()

    def submit(self, request: Request) -> Job:
        """Validate ``request`` on the caller's thread and queue it.

        Raises:
            ValueError: A field is invalid (the message names it); nothing is queued.
            RuntimeError: The engine is closed.
        """
        request.validate()
        self._check_draft(request)
        job = Job(request, next(self._ids))
        with self._cond:
            if self._closed:
                raise RuntimeError("engine is closed")
            ahead = len(self._queue) + (self._running is not None)
            self._queue.append(job)
            job._on_cancel = self._drop_queued
            job._emit(Queued(ahead))
            self._cond.notify_all()
        return job

    def generate(self, prompt, **fields) -> Result:
        """Blocking convenience: ``submit(Request(prompt, **fields)).result()``."""
        return self.submit(Request(prompt, **fields)).result()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the worker thread between jobs; return its Future."""
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("engine is closed")
            self._calls.append((fn, fut))
            self._cond.notify_all()
        return fut

    def cancel_all(self) -> int:
        """Cancel every queued and running job; return how many were cancelled."""
        with self._cond:
            jobs = list(self._queue) + ([self._running] if self._running else [])
        for j in jobs:
            j.cancel()
        return len(jobs)

    def unload(self, spec: str | None = None) -> list[str]:
        """Unload one model (or all when None) on the worker; return their names."""

        def _unload() -> list[str]:
            names = self.registry.unload(spec)
            for n in names:
                self._caches.pop(n, None)
            return names

        return self.call(_unload).result()

    def register_model(self, name: str, model, tokenizer) -> None:
        """Make an already built model available under ``name`` (built on the worker)."""
        self.call(lambda: self.registry.register(name, model, tokenizer)).result()

    def info(self) -> dict[str, Any]:
        """Device, worker state, queue, loaded models and BLAS acceleration."""
        from .. import _blas

        with self._cond:
            running = self._running
            queued = len(self._queue)
        return {
            "device": self._device,
            "worker_alive": self._thread.is_alive(),
            "running": None if running is None else running.id,
            "queued": queued,
            "models": self.registry.snapshot(),
            "blas": _blas.status(),
        }

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
        """Whether `close` was called."""
        return self._closed

    # -- internals ----------------------------------------------------------
    def _check_draft(self, request: Request) -> None:
        # On the caller's thread, without MLX: loaded models, or local tokenizer files.
        if request.mode != "draft":
            return
        keys = []
        for spec in (request.model, request.draft):
            lm = self.registry.peek(spec)
            keys.append(lm.vocab_key if lm is not None else spec_fingerprint(spec))
        if None not in keys and keys[0] != keys[1]:
            raise IncompatibleDraft(_vocab_message(request.model, request.draft))

    def _drop_queued(self, job: Job) -> None:
        with self._cond:
            try:
                self._queue.remove(job)
            except ValueError:
                return  # running or done: the worker sees the flag
            moves = self._renumber()
        job._emit(Finished("", "cancelled"))
        _emit_all(moves)

    def _renumber(self) -> list[tuple[Job, Queued]]:
        # Called with the lock held; the caller emits after releasing it, since
        # listeners may call back into the engine (e.g. cancel).
        base = self._running is not None
        return [(j, Queued(base + i)) for i, j in enumerate(self._queue) if j.position != base + i]

    def _loop(self) -> None:
        import mlx.core as mx
        from mlx_lm.generate import generation_stream

        self._device = _describe_device(mx)
        try:
            while True:
                moves = []
                with self._cond:
                    while not (self._queue or self._calls or self._closed):
                        self._cond.wait()
                    if self._calls:
                        fn, fut = self._calls.popleft()
                        job = None
                    elif self._queue:
                        job = self._running = self._queue.popleft()
                        moves = self._renumber()
                    else:
                        break
                _emit_all(moves)
                if job is None:
                    if fut.set_running_or_notify_cancel():
                        try:
                            fut.set_result(fn())
                        except BaseException as exc:  # noqa: BLE001 - handed to the caller
                            fut.set_exception(exc)
                    continue
                self._run(job, generation_stream)
                with self._cond:
                    self._running = None
        finally:
            with self._cond:
                self._running = None
                pending, self._queue = list(self._queue), deque()
                calls, self._calls = list(self._calls), deque()
            for j in pending:
                j._emit(Finished("", "cancelled"))
            for _, fut in calls:
                fut.cancel()
            self.registry.clear()
            self._caches.clear()
            if hasattr(mx, "clear_streams"):
                mx.clear_streams()

    def _run(self, job: Job, stream) -> None:
        if job.cancelled:
            job._emit(Finished("", "cancelled"))
            return
        import mlx.core as mx
        from mlx_lm.generate import wired_limit

        job._emit(Started())
        try:
            # Everything, loading and prefill included, on mlx-lm's generation stream.
            with mx.stream(stream):
                main = self.registry.get(job.request.model)
                draft = None
                if job.request.mode == "draft":
                    draft = self.registry.get(job.request.draft, pin=main.name)
                    _require_same_vocab(main, draft)
                with wired_limit(main.model, [stream]):  # raises the limit on Metal only
                    final = run_job(job, main, draft, self._cache_for, stream)
        except Exception as exc:  # loading errors end the job, not the worker
            final = Finished("", "error", None, f"{type(exc).__name__}: {exc}")
        job._emit(final)

    def _cache_for(self, loaded: LoadedModel) -> PromptCache:
        return self._caches.setdefault(loaded.name, PromptCache())


def _emit_all(moves: list[tuple[Job, Queued]]) -> None:
    for job, ev in moves:
        job._emit(ev)


def _require_same_vocab(main: LoadedModel, draft: LoadedModel) -> None:
    if main.vocab_key != draft.vocab_key:
        sizes = f" ({draft.vocab_size} vs {main.vocab_size} tokens)"
        raise IncompatibleDraft(_vocab_message(main.name, draft.name) + sizes)


def _vocab_message(main: str, draft: str) -> str:
    return (
        f"draft: model {draft!r} has a different vocabulary from main model {main!r}; "
        "a draft model must share the main model's tokenizer"
    )


def _describe_device(mx) -> str:
    dev = mx.default_device()
    kind = "gpu" if dev.type == mx.DeviceType.gpu else "cpu"
    if kind == "gpu" and mx.metal.is_available():
        return "gpu (Metal)"
    return kind
