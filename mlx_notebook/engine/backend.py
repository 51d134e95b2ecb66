"""The Backend seam: what the notebook layer may use of an engine, local or remote.

Views, magics, Compare, Sweep and Chat depend on this protocol, on `Job`, the
events and `Request` only. The local `Engine` (one MLX worker thread) and the
`RemoteEngine` (an OpenAI-compatible server such as ``mlx_lm.server``) both
implement it. `backend_for` picks one for a model spec without importing MLX
until a local model is used.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .job import Job
from .request import Request

API_KEY_ENV = "MLX_NOTEBOOK_API_KEY"


@dataclass(frozen=True)
class ModelInfo:
    """One model a backend has loaded (or a server offers).

    Attributes:
        name: Canonical name or id.
        path: Local path, if any.
        memory_mb: Memory of its weights, when known.
        dtype: Parameter dtype, when known.
        vocab_size: Tokens in its vocabulary, when known.
        fast_path: What the CPU fast path swapped in it, if anything.
        defaults: Sampling its ``generation_config.json`` sets, used where a
            request leaves a field unset.
    """

    name: str
    path: str | None = None
    memory_mb: float | None = None
    dtype: str | None = None
    vocab_size: int | None = None
    fast_path: tuple[str, ...] = ()
    defaults: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class EngineInfo:
    """What a backend reports about itself.

    Attributes:
        kind: ``"local"`` or ``"remote"``.
        device: Where generation runs: ``"cpu"``, ``"gpu (Metal)"``, or the server URL.
        worker_alive: Whether jobs can run.
        running: Id of the job running alone, if any.
        queued: Jobs waiting.
        batched: Ids of the jobs decoding together in the batch.
        models: Loaded models (local) or the models the server offers (remote).
        notes: Other lines worth showing (acceleration, prompt caches, server).
        closed: Why the backend is closed, or None while it is open.
    """

    kind: str
    device: str
    worker_alive: bool
    running: int | None = None
    queued: int = 0
    models: tuple[ModelInfo, ...] = ()
    batched: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    closed: str | None = None

    def format(self) -> str:
        """Human-readable status, as ``%mlx status`` prints it.

        What a user needs first (models, jobs, device), then how it is accelerated
        and what it caches.
        """
        lines = ["models:" if self.models else "models: none loaded"]
        for m in self.models:
            bits = [m.name]
            if m.dtype:
                bits.append(m.dtype)
            if m.memory_mb is not None:
                bits.append(f"{m.memory_mb} MB")
            if m.fast_path:
                bits.append("fast path: " + ", ".join(m.fast_path))
            if self.kind == "local":
                bits.append("sampling by default: " + _defaults_text(m.defaults))
            lines.append("  " + "  ".join(bits))
        lines += [
            f"backend: {self.kind}; worker: {'alive' if self.worker_alive else 'stopped'}; "
            f"running job: {self.running if self.running is not None else 'none'}; "
            f"queued: {self.queued}",
            f"device: {self.device}",
        ]
        if self.closed:
            lines.append(f"closed: {self.closed}")
        if self.notes:
            lines += ["details:", *("  " + n for n in self.notes)]
        return "\n".join(lines)


def _defaults_text(defaults: dict) -> str:
    from ..models.generation import FALLBACK, describe

    if not defaults:
        return "greedy (no generation_config.json sampling)"
    values = {**FALLBACK, **defaults, "from_model": list(defaults)}
    return describe(values).removesuffix(" (model defaults)") + " (generation_config.json)"


@dataclass
class Unloaded:
    """What `Engine.unload` did.

    Attributes:
        names: The models unloaded.
        cancelled: Ids of the jobs cancelled because they used those models.
        note: Why nothing could be unloaded, if that is the case.
    """

    names: list[str] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    note: str = ""

    def message(self) -> str:
        """One line for ``%mlx unload``."""
        if not self.names:
            return f"nothing to unload ({self.note})" if self.note else "nothing to unload"
        msg = f"unloaded: {', '.join(self.names)}"
        if self.cancelled:
            ids = ", ".join(map(str, self.cancelled))
            msg += f" (cancelled {len(self.cancelled)} job(s) using it: {ids})"
        return msg


@runtime_checkable
class Backend(Protocol):
    """Runs requests as jobs. Implemented by `Engine` and `RemoteEngine`."""

    def check(self, request: Request) -> None:
        """Validate ``request`` as `submit` would, queuing nothing (raises `ValueError`)."""

    def submit(self, request: Request) -> Job:
        """Validate and queue ``request``; return its job (FIFO, like the local engine)."""

    def cancel_all(self) -> int:
        """Cancel every queued and running job; return how many."""

    def unload(self, spec: str | None = None):
        """Free one model (or all); return an `Unloaded` report."""

    def info(self) -> EngineInfo:
        """What the backend reports about itself."""

    def logit_margin(self, request: Request, generated: list[int]) -> float | None:
        """Top-2 logit gap after the prompt and ``generated``, or None if unavailable."""

    def close(self) -> None:
        """Cancel everything and stop."""

    @property
    def closed(self) -> bool:
        """Whether the backend accepts no more work."""


@dataclass(frozen=True)
class RemoteSpec:
    """A model spec naming a server: ``http(s)://HOST:PORT/v1`` with optional ``#MODEL``.

    Attributes:
        base_url: The API's base URL, ending in ``/v1``.
        model: The server's model id, or None for the server's default.
    """

    base_url: str
    model: str | None = None


def remote_spec(spec: str | None) -> RemoteSpec | None:
    """Parse ``spec`` if it names a server; None otherwise."""
    if not spec or not spec.startswith(("http://", "https://")):
        return None
    url, _, model = spec.partition("#")
    return RemoteSpec(url.rstrip("/"), model or None)


_lock = threading.Lock()
_remotes: dict[tuple[str, str | None], object] = {}


@dataclass
class Route:
    """Where requests for a model go: the backend, and the model name it knows it by.

    Attributes:
        backend: The backend.
        model: The spec to put in the `Request` (a remote model id, or the local spec).
        remote: The server, for a remote model.
    """

    backend: Backend
    model: str
    remote: RemoteSpec | None = field(default=None)

    @property
    def label(self) -> str:
        """How a view names the model: with the server, for a remote one."""
        if self.remote is None:
            return self.model
        return f"{self.model} @ {self.remote.base_url}"


def backend_for(model: str, server_url: str | None = None, api_key: str | None = None) -> Route:
    """The backend for ``model``, and the name to ask it for.

    A server for ``http(s)://…`` specs or when ``server_url`` is set; otherwise the
    process-wide local engine (imported only now, with MLX).

    Args:
        model: A model spec.
        server_url: The server to use for non-URL specs (``%config MLXNotebook.server_url``).
        api_key: Bearer token; ``$MLX_NOTEBOOK_API_KEY`` when None.
    """
    spec = remote_spec(model)
    if spec is None and server_url:
        spec = RemoteSpec(server_url.rstrip("/"), None if model == "default" else model)
    if spec is None:
        from .worker import Engine

        return Route(Engine.default(), model)
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    with _lock:
        eng = _remotes.get((spec.base_url, key))
        if eng is None or eng.closed:
            from .remote import RemoteEngine

            eng = _remotes[(spec.base_url, key)] = RemoteEngine(spec.base_url, api_key=key)
    return Route(eng, spec.model or "default", spec)


def remote_engines() -> list:
    """The remote engines made so far (for ``%mlx status`` and shutdown)."""
    with _lock:
        return [e for e in _remotes.values() if not e.closed]


def existing_backends() -> list:
    """Every backend made so far and still open, local first; creates none."""
    import sys

    out = []
    worker = sys.modules.get(__name__.rsplit(".", 1)[0] + ".worker")
    local = getattr(getattr(worker, "Engine", None), "_default", None)
    if local is not None and not local.closed:
        out.append(local)
    return out + remote_engines()
