"""RemoteEngine: jobs streamed from an OpenAI-compatible server (``mlx_lm.server`` and others).

The same `Job`, events and FIFO queue as the local engine, so every view,
Compare and Chat work unchanged. Requests go to ``/v1/chat/completions`` (or
``/v1/completions`` without a chat template) with ``stream: true``; each
server-sent event becomes a `Token`. Jobs run on an asyncio loop in a thread of
their own. Stop cancels the job's task, which closes the HTTP stream: the
server notices at its next write, i.e. its next token (``mlx_lm.server`` does
not write during prefill, so a Stop then ends our job at once but the server
finishes its prefill before it sees the closed connection).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
from collections import deque

from ...origin import clean_url
from ..errors import EngineClosed, describe
from ..events import Finished, Notice, Queued, Started
from ..job import Job
from ..request import Request
from .openai_body import body
from .stream import ServerError, Stream, one_line

log = logging.getLogger("mlx_notebook")

UNSUPPORTED = {
    "lookup": "--lookup (prompt lookup) needs a local model: it drafts from token ids, "
    "which a server does not expose; use --draft MODEL for server-side speculation",
    "suffix": "--suffix (suffix drafting) needs a local model: it drafts from token ids, "
    "which a server does not expose; use --draft MODEL for server-side speculation",
}


class RemoteEngine:
    """A `Backend` that streams from a server.

    Args:
        base_url: The API's base URL, e.g. ``http://127.0.0.1:8080/v1``.
        api_key: Sent as a bearer token, if given (never stored: not in a result's key,
            the result cache or a saved output).
        timeout: Seconds without data from the server before a job fails.
        connect_timeout: Seconds to connect.
        results: The result cache (`replay.results.Replays`): greedy and seeded
            requests are stored and replayed, keyed on the URL (credentials left out)
            and the request's body. None: as ``MLX_NOTEBOOK_RESULT_CACHE`` says.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        results=None,
    ) -> None:
        from ..replay.results import Replays

        self.result_cache = results if results is not None else Replays.from_config()
        self.base_url = base_url.rstrip("/")
        self.shown_url = clean_url(self.base_url)  # what views and errors say (no password)
        self.api_key = api_key
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._lock = threading.Lock()
        self._queue: deque[Job] = deque()
        self._running: Job | None = None
        self._task: asyncio.Task | None = None
        self._closed = False
        self._ids = itertools.count(1)
        self._death: str | None = None
        self._loop = asyncio.new_event_loop()
        self._wake: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="mlx-remote", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    # -- Backend ---------------------------------------------------------------
    def check(self, request: Request) -> None:
        """Validate ``request``; refuse options that need a local model."""
        request.validate()
        why = UNSUPPORTED.get(request.mode)
        if why:
            raise ValueError(why)
        schema = request.constraint
        if schema is not None and schema.kind != "json":
            raise ValueError(
                f"schema: a server takes JSON Schemas only (OpenAI's response_format); "
                f"a {schema.kind} constraint needs a local model"
            )
        if request.branch_from is not None:
            raise ValueError("branch_from: branching feeds token ids, which needs a local model")

    def submit(self, request: Request) -> Job:
        """Validate and queue ``request``; return its job."""
        self.check(request)
        with self._lock:
            if self._closed and self._death is None:
                raise EngineClosed(self._closed_reason())
            job = Job(request, next(self._ids), on_cancel=self._drop_queued)
            if self._death is not None:  # its thread died: every job says why, never "cancelled"
                job.emit(Finished("", "error", error=f"the server client stopped: {self._death}"))
                return job
            ahead = len(self._queue) + (self._running is not None)
            self._queue.append(job)
            job.emit(Queued(ahead, self._busy_with()))
        try:
            self._loop.call_soon_threadsafe(self._wake.set)
        except RuntimeError:  # the loop just ended: its thread ended the queued jobs
            pass
        return job

    def cancel_all(self) -> int:
        """Cancel every queued and running job."""
        with self._lock:
            jobs = list(self._queue) + ([self._running] if self._running else [])
        for j in jobs:
            j.cancel()
        return len(jobs)

    def unload(self, spec: str | None = None):
        """Nothing to free here: the server manages its models."""
        from ..info import Unloaded

        return Unloaded(note="models on a server are loaded and freed by the server")

    def sampling_defaults(self, model: str) -> dict:
        """None known here: a server applies its model's own defaults itself."""
        return {}

    def logit_margin(self, request: Request, generated: list[int]) -> None:
        """Not available: servers do not expose logits for a given prefix."""
        return None

    def info(self):
        """The server, its models, and the queue."""
        from ..info import EngineInfo, ModelInfo

        models, note = self.server_models()
        with self._lock:
            running, queued = self._running, len(self._queue)
        return EngineInfo(
            kind="remote",
            device=self.shown_url,
            worker_alive=self._thread.is_alive() and not self._closed,
            running=None if running is None else running.id,
            queued=queued,
            models=tuple(ModelInfo(m) for m in models),
            notes=(f"server: {self.shown_url} ({note})",),
            closed=self._closed_reason() if self._closed else None,
        )

    def server_models(self) -> tuple[list[str], str]:
        """Model ids from ``GET /v1/models``, and a note on reachability."""
        try:
            import httpx

            r = httpx.get(f"{self.base_url}/models", headers=self._headers(), timeout=3.0)
        except Exception as exc:  # the status line says why; nothing else depends on it
            return [], f"unreachable: {one_line(exc)}"
        try:
            r.raise_for_status()
            return [m.get("id", "?") for m in r.json().get("data", [])], "reachable"
        except Exception:
            return [], f"reachable; its /models answered HTTP {r.status_code} with no model list"

    def close(self, timeout: float = 5.0) -> None:
        """Cancel everything and stop the loop's thread."""
        with self._lock:
            self._closed = True
        self.cancel_all()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._wake.set)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        """Whether `close` was called or the client's thread died."""
        return self._closed

    def _closed_reason(self) -> str:
        if self._death:
            return f"remote engine is closed: its thread died ({self._death})"
        return "remote engine is closed"

    # -- the loop ---------------------------------------------------------------
    def _headers(self) -> dict:
        h = {"Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _busy_with(self) -> str:
        r = self._running
        return "" if r is None else f"job {r.id} on {r.request.model}"

    def _drop_queued(self, job: Job) -> None:
        with self._lock:
            if job in self._queue:
                self._queue.remove(job)
                moves = self._renumber()
                queued = True
            else:
                queued, moves = False, []
                task = self._task if job is self._running else None
        if queued:
            job.emit(Finished("", "cancelled"))
            for j, ev in moves:
                j.emit(ev)
        elif task is not None:
            self._loop.call_soon_threadsafe(task.cancel)

    def _renumber(self) -> list[tuple[Job, Queued]]:
        base = self._running is not None
        busy = self._busy_with()
        return [(j, Queued(base + i, busy)) for i, j in enumerate(self._queue)]

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._wake = asyncio.Event()
        self._ready.set()
        death: BaseException | None = None
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - every job still ends, saying why
            death = exc
            log.exception("mlx_notebook: the server client's thread died")
        finally:
            with self._lock:
                self._closed = True
                self._death = None if death is None else _why(death)
                pending, self._queue = list(self._queue), deque()
                running, self._running = self._running, None
            for j in pending + ([running] if running is not None else []):
                if death is None:  # closed: the jobs were cancelled by `close`
                    j.emit(Finished("", "cancelled"))
                else:
                    msg = f"the server client stopped: {self._death}"
                    j.emit(Finished(j.text, "error", error=msg, exception=death))
            self._loop.close()

    async def _serve(self) -> None:
        import httpx

        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        async with httpx.AsyncClient(timeout=timeout) as client:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    job = self._queue.popleft() if self._queue else None
                    if job is not None:
                        self._running = job
                        moves = self._renumber()
                if job is None:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                for j, ev in moves:
                    j.emit(ev)
                self._task = asyncio.ensure_future(self._run(client, job))
                try:
                    await self._task
                except asyncio.CancelledError:
                    pass  # the job's cancel; _run already emitted Finished
                with self._lock:
                    self._running, self._task = None, None

    async def _run(self, client, job: Job) -> None:
        job.emit(Started())
        stream = Stream(job)
        try:
            if job.cancelled:
                raise asyncio.CancelledError
            req = job.request
            stored = self.result_cache.lookup_server(job, self.base_url, body(req))
            if stored is not None:  # replayed: no request to the server
                job.emit(stored)
                return
            path = "/chat/completions" if req.chat else "/completions"
            async with client.stream(
                "POST", self.base_url + path, json=body(req), headers=self._headers()
            ) as resp:
                if resp.status_code >= 400:
                    raise ServerError(_http_error(resp.status_code, await resp.aread()))
                async for line in resp.aiter_lines():
                    if stream.feed(line):
                        break
                else:
                    if stream.reason is None:  # neither [DONE] nor a finish reason
                        raise ServerError("the server closed the connection mid-stream")
            fin = stream.finished()
            _check_schema(job, fin)
            if req.logprobs is not None and not stream.recorded and fin.text:
                job.emit(Notice(NO_LOGPROBS))
            self.result_cache.keep(job, fin)  # before a waiting caller can ask again
            job.emit(fin)
        except asyncio.CancelledError:
            job.emit(stream.finished("cancelled"))
            raise
        except Exception as exc:
            job.emit(stream.finished("error", _describe_http(exc, self.shown_url)))


NO_LOGPROBS = (
    "logprobs: the server sent none (mlx_lm.server sends them only without streaming); "
    "a local model records them"
)


def _check_schema(job: Job, fin: Finished) -> None:
    # The server is trusted with nothing: a reply that ignores the schema is said so.
    if job.request.schema is None or fin.finish_reason != "stop":
        return
    from ...value_check import reply_problem

    problem = reply_problem(job.request.constraint, fin.text)
    if problem:
        job.emit(Notice(f"the server ignored the schema (response_format): {problem}"))


def _why(exc: BaseException) -> str:
    """One line on why the client's thread stopped, with the fix for a missing module."""
    if isinstance(exc, ImportError) and exc.name:
        return f"{describe(exc)} (install it: pip install {exc.name})"
    return describe(exc)


def _http_error(status: int, raw: bytes) -> str:
    try:
        data = json.loads(raw)
        msg = data.get("error", data) if isinstance(data, dict) else data
    except ValueError:
        msg = raw.decode(errors="replace")
    return f"the server answered HTTP {status}: {one_line(msg) or 'no message'}"


def _describe_http(exc: BaseException, url: str) -> str:
    import httpx

    if isinstance(exc, ServerError):
        return f"ServerError: {exc}"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"ServerError: the server closed the connection mid-stream ({one_line(exc)})"
    if isinstance(exc, httpx.ConnectError):
        return f"ServerError: could not connect to {url} (is the server running?)"
    if isinstance(exc, httpx.TimeoutException):
        return f"ServerError: no answer from {url} in time ({type(exc).__name__})"
    return describe(exc)
