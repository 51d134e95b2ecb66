"""The engine: one MLX worker thread running cancellable, streaming jobs, behind a Backend seam.

No IPython or ipywidgets imports here: a plain script can use it directly.
`Engine` (and with it MLX and mlx-lm) is imported on first use, so that
``import mlx_notebook`` stays fast.
"""

from .backend import Backend, EngineInfo, ModelInfo, Unloaded, backend_for
from .errors import (
    Cancelled,
    ContextOverflow,
    EngineClosed,
    GenerationError,
    IncompatibleDraft,
)
from .events import (
    Event,
    Finished,
    Loading,
    Notice,
    PrefillProgress,
    Queued,
    Started,
    Stats,
    Token,
)
from .job import Job, Result
from .request import Request

__all__ = [
    "Backend",
    "Cancelled",
    "ContextOverflow",
    "Engine",
    "EngineClosed",
    "EngineInfo",
    "Event",
    "Finished",
    "GenerationError",
    "IncompatibleDraft",
    "Job",
    "Loading",
    "ModelInfo",
    "Notice",
    "PrefillProgress",
    "Queued",
    "RemoteEngine",
    "Request",
    "Result",
    "Started",
    "Stats",
    "Token",
    "Unloaded",
    "backend_for",
]

_LAZY = {"Engine": "local.engine", "RemoteEngine": "remote.client"}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
