"""The Engine: one daemon worker thread that owns every piece of MLX state."""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ...models.registry import Registry
from ..errors import EngineClosed
from ..info import EngineInfo, Unloaded
from ..job import Job, Result
from ..replay.results import Replays
from ..request import Request
from .checks import Checked, check_request
from .diagnostics import fork_point, model_infos, status_notes
from .scheduler import Scheduler

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
        results: The result cache (`replay.results.Replays`): greedy and seeded
            results are stored and replayed. None: as ``MLX_NOTEBOOK_RESULT_CACHE``
            and ``MLX_NOTEBOOK_RESULT_CACHE_PATH`` say; ``False``: off (a request's
            own ``cache`` field can still ask for it).
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
        results: Replays | None | bool = None,
    ) -> None:
        self.registry = registry or Registry(max_loaded=max_loaded)
        if results is None or results is False:
            results = Replays("off") if results is False else Replays.from_config()
        self.result_cache = results  # `%mlx cache`, `%config MLXNotebook.cache`
        self.scheduler = Scheduler(self.registry, max_batch, prompt_cache_bytes, results)
        # Prompt caches hold their model: drop them when the registry lets it go.
        self.registry.on_evict = self.scheduler.forget
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
        thread = self.scheduler.thread
        if not thread.is_alive() and not self.scheduler.closed:
            thread.start()

    def check(self, request: Request) -> Checked:
        """Validate ``request`` as `submit` would, without queuing anything.

        Models already loaded are checked in full (context window, ``top_k``,
        draft vocabulary, chat template); others are checked on the worker before
        prefill.

        Returns:
            What the checks learned (the resolved model, the encoded prompt), which
            `submit` hands to the worker so that nothing is resolved or encoded twice.

        Raises:
            ValueError: A field is invalid (the message names it), the prompt does
                not fit the context window, the draft's vocabulary differs, or a
                conversation's model has no chat template.
        """
        return check_request(request, self.registry)

    def submit(self, request: Request) -> Job:
        """Validate ``request`` on the caller's thread and queue it.

        Raises:
            ValueError: See `check`; nothing is queued.
            EngineClosed: The engine is closed.
        """
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[Request], label: str | None = None) -> list[Job]:
        """Validate every request, then queue them all at once, in order.

        Queued together, rows that can share a batch start decoding together
        (`map` submits its rows this way).

        Args:
            requests: What to generate, in order.
            label: Names a bad request's position in the error, e.g. ``"row"``
                gives ``row 3: prompt: must not be empty``.

        Raises:
            ValueError: A request is invalid (see `check`); nothing is queued.
            EngineClosed: The engine is closed.
        """
        if self.scheduler.closed:  # before checking models the closed engine has dropped
            raise EngineClosed(self.scheduler.closed_reason())
        checked = []
        for i, request in enumerate(requests):
            try:
                checked.append((request, self.check(request)))
            except ValueError as exc:
                if label is None:
                    raise
                raise ValueError(f"{label} {i}: {exc}") from None
        return self.scheduler.enqueue(checked)

    def generate(self, prompt, **fields) -> Result:
        """Blocking convenience: ``submit(Request(prompt, **fields)).result()``."""
        return self.submit(Request(prompt, **fields)).result()

    def score(
        self,
        text,
        prompt=None,
        *,
        model: str = "default",
        chat: bool | None = None,
        system: str | None = None,
        top_k: int = 5,
    ):
        """Per-token log-probabilities of ``text`` under ``model``, without generating.

        One prefill over the context and the text, on the worker (see
        `scoring.split_tokens` for what is scored: a text, a reply to ``prompt``,
        or the last assistant message of a conversation).

        Returns:
            A `TokenTable` (``.to_frame()``, ``.perplexity``, ``.mean_logprob``).

        Raises:
            ValueError: Nothing to score, or ``top_k`` out of 0..20.
        """

        def work():
            from .scoring import score_tokens, split_tokens  # MLX: imported on the worker

            lm = self.registry.get(model)
            ctx, scored = split_tokens(lm.tokenizer, text, prompt, chat, system)
            return score_tokens(lm.model, lm.tokenizer, ctx, scored, top_k)

        return self.call(work).result()

    def option_logprobs(
        self,
        questions: list[tuple[Any, list[str]]],
        *,
        model: str = "default",
        chat: bool | None = None,
        system: str | None = None,
    ) -> Future:
        """Each option's log-likelihood as the reply to its prompt, batched (a Future).

        For multiple choice without generating: ``questions`` are ``(prompt,
        [option, ...])``; each option is scored after the prompt (through the chat
        template unless ``chat=False``) as `scoring.option_logprobs` does. Cancel
        the Future before it starts and nothing runs.

        Returns:
            A Future of one list per question: each option's summed log-probability.
        """

        def work():
            from .scoring import option_items, option_logprobs  # MLX: on the worker

            lm = self.registry.get(model)
            return option_logprobs(lm.model, option_items(lm.tokenizer, questions, chat, system))

        return self.call(work)

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the worker thread at its next safe point; return its Future.

        Safe points are between jobs and at the running job's cancel points
        (between decode steps and prefill chunks), so a call waits at most one
        step. Cancelling the Future before it starts means ``fn`` never runs.

        Raises:
            EngineClosed: The engine is closed.
        """
        return self.scheduler.call(fn)

    def run_on_worker(self, fn: Callable[[], Any], timeout: float | None = 30.0) -> Any:
        """`call` ``fn`` and wait for its result, for at most ``timeout`` seconds.

        If the wait times out or is interrupted, the call is withdrawn: it does not
        run later.

        Raises:
            RuntimeError: Called on the worker thread itself (e.g. from a listener),
                where waiting would deadlock.
            TimeoutError: The worker did not finish ``fn`` in time.
        """
        if threading.current_thread() is self.scheduler.thread:
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
        jobs = self.scheduler.jobs()
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
        if threading.current_thread() is self.scheduler.thread:
            self.run_on_worker(lambda: None)  # raises the clear RuntimeError
        key = None if spec is None else self.registry.key_for(spec)
        victims = [j for j in self.scheduler.jobs() if key is None or key in self._models_of(j)]
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
            from ..decoding.suffix import SuffixIndex

            key = None if spec is None else self.registry.key_for(spec)
            for name, state in self.scheduler.states.items():
                if key is None or name == key:
                    state.suffix = SuffixIndex(state.suffix.max_tokens)

        self.run_on_worker(clear, timeout)

    def set_prompt_cache_bytes(self, n: int | None) -> None:
        """Change every model's prompt-cache budget (None: the default)."""
        self.scheduler.prompt_cache_bytes = n

        def resize() -> None:  # the caches are the worker's
            from ..cache.prompt_cache import default_budget

            for state in list(self.scheduler.states.values()):
                state.cache.resize(default_budget() if n is None else n)

        self.run_on_worker(resize)

    def sampling_defaults(self, model: str) -> dict:
        """The sampling ``model``'s authors set (`generation.defaults_for`), without loading it."""
        lm = self.registry.peek(model)
        if lm is not None:
            return dict(lm.defaults)
        from ...models.generation import defaults_for

        return defaults_for(model)

    def logit_margin(self, request: Request, generated: list[int], timeout: float = 60) -> float:
        """Top-2 logit gap of ``request.model`` after the prompt and ``generated`` tokens."""
        return self.fork_point(request, generated, [], timeout)[0]

    def fork_point(self, request: Request, generated: list[int], tokens: list[int], timeout=60):
        """`diagnostics.fork_point` on the worker: the margin and each token's standing."""
        return self.run_on_worker(
            lambda: fork_point(self.registry.get(request.model), request, generated, tokens),
            timeout,
        )

    def info(self) -> EngineInfo:
        """Device, worker state, queue, loaded models, acceleration and prompt caches."""
        sched = self.scheduler
        running, queued = sched.counts()
        rows = list(sched.batch.rows)
        notes = status_notes(sched.states, rows, sched.max_batch, sched.batch.model_name)
        models = model_infos(self.registry)
        return EngineInfo(
            kind="local",
            device=sched.device,
            worker_alive=sched.thread.is_alive(),
            running=None if running is None else running.id,
            queued=queued,
            batched=tuple(r.job.id for r in rows),
            models=models,
            notes=tuple(notes),
            closed=sched.closed_reason() if sched.closed else None,
        )

    def close(self, timeout: float | None = 10.0) -> None:
        """Cancel everything, stop the worker and wait for it (never under our lock)."""
        self.scheduler.close()
        self.cancel_all()
        thread = self.scheduler.thread
        if thread.is_alive() and threading.current_thread() is not thread:
            thread.join(timeout)

    @property
    def closed(self) -> bool:
        """Whether the engine was closed or its worker died."""
        return self.scheduler.closed

    @property
    def max_batch(self) -> int:
        """Most jobs decoded together (0 or 1: every job runs alone)."""
        return self.scheduler.max_batch

    @max_batch.setter
    def max_batch(self, n: int) -> None:
        self.scheduler.max_batch = n

    @property
    def forward_passes(self) -> int:
        """Forward passes run so far in this process: prefill, steps, verify passes, scoring.

        A result replayed from the result cache runs none.
        """
        from ..cache.sequence import forward_passes

        return forward_passes()

    @property
    def prompt_cache_bytes(self) -> int | None:
        """Byte budget of each model's prompt caches (None: the default)."""
        return self.scheduler.prompt_cache_bytes

    # -- internals ----------------------------------------------------------
    def _models_of(self, job: Job) -> set[str]:
        r = job.request
        specs = [r.model] + ([r.draft] if r.mode == "draft" else [])
        return {self.registry.key_for(s) for s in specs}


def _close_all() -> None:
    # Every engine, not only the default: a worker mid-computation while the
    # interpreter finalizes aborts the process ("terminate called ...").
    for eng in list(_engines):
        eng.close(timeout=10.0)


atexit.register(_close_all)
