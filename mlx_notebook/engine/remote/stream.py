"""A server's event stream, folded into a job's `Token` events and its `Finished`."""

from __future__ import annotations

import json
import time

from ..events import Finished, Stats, Token, wall_time
from ..job import Job
from .logprobs import records_of


class ServerError(RuntimeError):
    """The server refused or broke a request (the message is one line)."""


class Stream:
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
            raise ServerError(f"the server reported: {one_line(chunk['error'])}")
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
            s.ended_at = wall_time(self.t_last)
            if s.ttft_s > 0:
                s.prompt_tps = s.prompt_tokens / s.ttft_s
            if s.generation_tokens > 1 and self.t_last > self.t_first:
                s.generation_tps = (s.generation_tokens - 1) / (self.t_last - self.t_first)
        s.drafts_known = self.job.request.mode == "normal"  # servers do not report them
        if reason is None:
            reason = "length" if self.reason == "length" else "stop"
        return Finished("".join(self.pieces), reason, None, error, s)


def one_line(x) -> str:
    """The first line of a message (a server's error dict or any object), at most 300 chars."""
    if isinstance(x, dict):
        x = x.get("message") or json.dumps(x)
    text = str(x).strip()
    first = text.splitlines()[0] if text else ""
    return first[:300]
