"""The worker thread's side of the `Engine`: which job runs when, and running it.

Each turn of the loop runs the calls waiting at this safe point, admits queued
jobs that can join the batch (normal decoding on the batch's model, while slots
are free), and then either starts the next job that must run alone or, with
none waiting, advances the batch by one tick. A job running alone calls back at
each of its cancel points, where the calls, admissions and one batch tick run
too, so batched rows and the job alone take turns step by step.
"""

from __future__ import annotations

import logging
from collections import deque

from ...models.registry import LoadedModel
from ...models.spec import ModelNotFound
from ..cache.prompt_cache import ModelState
from ..decoding.device import governor
from ..errors import EngineClosed, describe
from ..events import Finished, Loading, Notice, Queued, Started
from ..job import Job
from ..request import Request
from .checks import require_same_vocab
from .diagnostics import describe_device

log = logging.getLogger("mlx_notebook")


class Scheduling:
    """Worker-thread methods of `Engine` (a mixin; the state is set up in `Engine`)."""

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
        return self._max_batch > 1 and r.batch and r.mode == "normal" and job.id not in self._alone

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

    def _begin(self, job: Job) -> bool:
        """A job leaves the queue: end it if it was cancelled meanwhile, else start it."""
        if job.cancelled:
            self._alone.pop(job.id, None)
            job.emit(Finished("", "cancelled"))
            return False
        if self._alone.pop(job.id, None) is None:  # a job sent back to run alone has started
            job.emit(Started())
        return True

    def _start_row(self, job: Job) -> None:
        if not self._begin(job):
            return
        try:
            main = self._load(job, job.request.model, pin=self._batch.model_name)
        except BaseException as exc:  # noqa: BLE001 - loading errors end the job, not the worker
            job.emit(Finished.failed(exc))
            return
        why = self._batch.admit(job, main)
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
        """Run ``job`` alone (the loop has made ``stream`` the default stream)."""
        if not self._begin(job):
            return
        from mlx_lm.generate import wired_limit

        from .runner import run_job

        try:
            main = self._load(job, job.request.model)
            draft = None
            if job.request.mode == "draft":
                draft = self._load(job, job.request.draft, pin=main.name, draft=True)
                require_same_vocab(main, draft)
            with wired_limit(main.model, [stream]):  # raises the limit on Metal only
                final = run_job(job, main, draft, self._state_for, stream, self._between)
        except BaseException as exc:  # noqa: BLE001 - loading errors end the job, not the worker
            final = Finished.failed(exc)
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
        from ..cache.prompt_cache import PromptCache

        if self.registry.peek(loaded.name) is not loaded:
            return ModelState()  # unloaded while the job ran: keep nothing for it
        state = self._state.get(loaded.name)
        if state is None:
            state = self._state[loaded.name] = ModelState(PromptCache(self.prompt_cache_bytes))
        return state


def _emit_all(moves: list[tuple[Job, Queued]]) -> None:
    for job, ev in moves:
        job.emit(ev)
