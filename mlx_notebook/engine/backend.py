"""The Backend seam: what the notebook layer may use of an engine, local or remote.

Views, magics, Compare, Sweep and Chat depend on this protocol, on `Job`, the
events and `Request` only. The local `Engine` (one MLX worker thread) and the
`RemoteEngine` (an OpenAI-compatible server such as ``mlx_lm.server``) both
implement it. `backend_for` picks one for a model spec without importing MLX
until a local model is used.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .. import config
from .info import EngineInfo, ModelInfo, Unloaded
from .job import Job
from .request import Request

__all__ = ["Backend", "EngineInfo", "ModelInfo", "Route", "Unloaded", "backend_for"]

API_KEY_ENV = "MLX_NOTEBOOK_API_KEY"


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

    def sampling_defaults(self, model: str) -> dict:
        """The sampling fields ``model`` sets for requests that leave them unset ({}: none)."""

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
        from ..origin import clean_url

        return f"{self.model} @ {clean_url(self.remote.base_url)}"


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
        from .local.engine import Engine

        return Route(Engine.default(), model)
    key = api_key if api_key is not None else (config.get(API_KEY_ENV) or None)
    with _lock:
        eng = _remotes.get((spec.base_url, key))
        if eng is None or eng.closed:
            from .remote.client import RemoteEngine

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
    worker = sys.modules.get(__name__.rsplit(".", 1)[0] + ".local.engine")
    local = getattr(getattr(worker, "Engine", None), "_default", None)
    if local is not None and not local.closed:
        out.append(local)
    return out + remote_engines()
