"""The engine: one MLX worker thread running cancellable, streaming jobs.

No IPython or ipywidgets imports here: a plain script can use it directly.
"""

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
from .worker import Engine, Unloaded

__all__ = [
    "Cancelled",
    "ContextOverflow",
    "Engine",
    "EngineClosed",
    "Event",
    "Finished",
    "GenerationError",
    "IncompatibleDraft",
    "Job",
    "Loading",
    "Notice",
    "PrefillProgress",
    "Queued",
    "Request",
    "Result",
    "Started",
    "Stats",
    "Token",
    "Unloaded",
]
