"""The engine: one MLX worker thread running cancellable, streaming jobs.

No IPython or ipywidgets imports here: a plain script can use it directly.
"""

from .errors import Cancelled, IncompatibleDraft
from .events import Event, Finished, PrefillProgress, Queued, Started, Stats, Token
from .job import Job, Result
from .request import Request
from .worker import Engine

__all__ = [
    "Cancelled",
    "Engine",
    "Event",
    "Finished",
    "IncompatibleDraft",
    "Job",
    "PrefillProgress",
    "Queued",
    "Request",
    "Result",
    "Started",
    "Stats",
    "Token",
]
