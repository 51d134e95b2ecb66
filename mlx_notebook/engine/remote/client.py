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
import threading
import time
from collections import deque

from ..errors import describe
from ..events import Finished, Notice, Queued, Started, Stats, Token
from ..job import Job
from ..request import Request
from .logprobs import records_of
from .openai_body import body

UNSUPPORTED = {
    "lookup": "--lookup (prompt lookup) needs a local model: it drafts from token ids, "
    "which a server does not expose; use --draft MODEL for server-side speculation",
    "suffix": "--suffix (suffix drafting) needs a local model: it drafts from token ids, "
    "which a server does not expose; use --draft MODEL for server-side speculation",
}


class ServerError(RuntimeError):
    """The server refused or broke a request (the message is one line)."""


class RemoteEngine:
    """A `Backend` that streams from a server.

    Args:
        base_url: The API's base URL, e.g. ``http://127.0.0.1:8080/v1``.
        api_key: Sent as a bearer token, if given.
        timeout: Seconds without data from the server before a job fails.
        connect_timeout: Seconds to connect.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._lock = threading.Lock()
        self._queue: deque[Job] = deque()
        self._running: Job | None = None
        self._task: asyncio.Task | None = None
        self._closed = False
        self._ids = itertools.count(1)
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
            if self._closed:
                raise RuntimeError("remote engine is closed")
            job = Job(request, next(self._ids), on_cancel=self._drop_queued)
            ahead = len(self._queue) + (self._running is not None)
            self._queue.append(job)
            job.emit(Queued(ahead, self._busy_with()))
        self._loop.call_soon_threadsafe(self._wake.set)
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
            device=self.base_url,
            worker_alive=self._thread.is_alive() and not self._closed,
            running=None if running is None else running.id,
            queued=queued,
            models=tuple(ModelInfo(m) for m in models),
            notes=(f"server: {self.base_url} ({note})",),
            closed="closed" if self._closed else None,
        )

    def server_models(self) -> tuple[list[str], str]:
        """Model ids from ``GET /v1/models``, and a note on reachability."""
        import httpx

        try:
            r = httpx.get(f"{self.base_url}/models", headers=self._headers(), timeout=3.0)
        except Exception as exc:  # the status line says why; nothing else depends on it
            return [], f"unreachable: {_one_line(exc)}"
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
        """Whether `close` was called."""
        return self._closed

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
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            with self._lock:
                pending, self._queue = list(self._queue), deque()
            for j in pending:
                j.emit(Finished("", "cancelled"))
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
        stream = _Stream(job)
        try:
            if job.cancelled:
                raise asyncio.CancelledError
            req = job.request
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
            job.emit(fin)
        except asyncio.CancelledError:
            job.emit(stream.finished("cancelled"))
            raise
        except Exception as exc:
            job.emit(stream.finished("error", _describe_http(exc, self.base_url)))


class _Stream:
    """Folds a server's SSE lines into `Token` events and the terminal `Finished`."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.pieces: list[str] = []
        self.n = 0
        self.reason: str | None = None
        self.recorded = 0  # tokens whose logprobs the server sent
        self.usage: dict = {}
        self.t0 = time.perf_counter()
        self.t_first = self.t_last = None

    def feed(self, line: str) -> bool:
        """One line of the event stream; True at the end of the stream."""
        line = line.strip()
        if not line or line.startswith(":"):
            return False  # blank separator or keep-alive comment
        if not line.startswith("data:"):
            return False  # other SSE fields (event:, id:) carry nothing we use
        data = line[5:].strip()
        if data == "[DONE]":
            return True
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ServerError(f"malformed event from the server: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise ServerError(f"malformed event from the server: {data[:80]!r}")
        if chunk.get("error"):
            raise ServerError(f"the server reported: {_one_line(chunk['error'])}")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        k = self.job.request.logprobs
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") if "delta" in choice else choice.get("text")
            recs = records_of(choice, self.n, k) if k is not None else []
            self.recorded += len(recs)
            if text or recs:
                now = time.perf_counter()
                self.t_first = self.t_first or now
                self.t_last = now
                self.pieces.append(text or "")
                # One event per token the server described: the chunk's text rides
                # on the first, so the text is exactly what was streamed.
                for j in range(max(1, len(recs))):
                    info = recs[j] if recs else None
                    piece = (text or "") if j == 0 else ""
                    self.job.emit(Token(piece, -1, False, self.n, info=info))
                    self.n += 1
            if choice.get("finish_reason"):
                self.reason = choice["finish_reason"]
        return False

    def finished(self, reason: str | None = None, error: str | None = None) -> Finished:
        """The terminal event for what arrived so far."""
        s = Stats()
        s.prompt_tokens = int(self.usage.get("prompt_tokens") or 0)
        s.generation_tokens = int(self.usage.get("completion_tokens") or self.n)
        if self.t_first is not None:
            s.ttft_s = self.t_first - self.t0
            s.total_s = self.t_last - self.t0
            if s.ttft_s > 0:
                s.prompt_tps = s.prompt_tokens / s.ttft_s
            if s.generation_tokens > 1 and self.t_last > self.t_first:
                s.generation_tps = (s.generation_tokens - 1) / (self.t_last - self.t_first)
        s.drafts_known = self.job.request.mode == "normal"  # servers do not report them
        if reason is None:
            reason = "length" if self.reason == "length" else "stop"
        return Finished("".join(self.pieces), reason, None, error, s)


NO_LOGPROBS = (
    "logprobs: the server sent none (mlx_lm.server sends them only without streaming); "
    "a local model records them"
)


def _check_schema(job: Job, fin: Finished) -> None:
    # The server is trusted with nothing: a reply that ignores the schema is said so.
    if job.request.schema is None or fin.finish_reason != "stop":
        return
    from ...schema import reply_problem

    problem = reply_problem(job.request.constraint, fin.text)
    if problem:
        job.emit(Notice(f"the server ignored the schema (response_format): {problem}"))


def _one_line(x) -> str:
    if isinstance(x, dict):
        x = x.get("message") or json.dumps(x)
    text = str(x).strip()
    first = text.splitlines()[0] if text else ""
    return first[:300]


def _http_error(status: int, raw: bytes) -> str:
    try:
        data = json.loads(raw)
        msg = data.get("error", data) if isinstance(data, dict) else data
    except ValueError:
        msg = raw.decode(errors="replace")
    return f"the server answered HTTP {status}: {_one_line(msg) or 'no message'}"


def _describe_http(exc: BaseException, url: str) -> str:
    import httpx

    if isinstance(exc, ServerError):
        return f"ServerError: {exc}"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"ServerError: the server closed the connection mid-stream ({_one_line(exc)})"
    if isinstance(exc, httpx.ConnectError):
        return f"ServerError: could not connect to {url} (is the server running?)"
    if isinstance(exc, httpx.TimeoutException):
        return f"ServerError: no answer from {url} in time ({type(exc).__name__})"
    return describe(exc)
