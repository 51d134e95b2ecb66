"""mlx_notebook: run local LLMs with MLX inside Jupyter.

``%load_ext mlx_notebook`` registers ``%%generate`` and ``%mlx``. The engine
can also be used from plain Python::

    import mlx_notebook as mn
    print(mn.generate("Name three rivers.", max_tokens=64).text)
"""

import sys as _sys

if _sys.platform.startswith("linux"):
    # Must precede the first `import mlx.core` in the process (see cpu.blas). It loads
    # OpenBLAS and the fast path's library if already built; it compiles nothing.
    from .cpu import blas as _blas

    _blas.preload()

from . import display as _display  # noqa: E402
from .engine import Finished, GenerationError, Job, Request, Result, Token  # noqa: E402


def _html_for(value) -> str:
    # A result's view: the notebook layer's, loaded when the first result is shown.
    from .notebook.magics.formatters import html_for

    return html_for(value)


def _live_for(value, marimo: bool):
    # A running value's live view (the notebook layer's); its widget, for marimo.
    from .notebook.magics.formatters import live_for

    return live_for(value, marimo)


_display.set_renderer(_html_for)
_display.set_live(_live_for)

__all__ = [
    "Chat",
    "ChatUI",
    "Engine",
    "Finished",
    "GenerationError",
    "Job",
    "Panel",
    "Request",
    "Result",
    "Schema",
    "Token",
    "compare",
    "evaluate",
    "generate",
    "last",
    "load_ipython_extension",
    "map",
    "provenance",
    "score",
    "stream",
    "sweep",
    "unload_ipython_extension",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # The local engine imports MLX and mlx-lm (about a second): only when first used.
    if name == "Engine":
        from .engine.local.engine import Engine

        return Engine
    if name == "Chat":
        from .chat.conversation import Chat

        return Chat
    if name == "ChatUI":
        from .notebook.chat_ui.widget import ChatUI

        return ChatUI
    if name == "Schema":
        from .schema import Schema

        return Schema
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def generate(prompt, **fields) -> Result:
    """Generate and block for the `Result` (on a server for ``http(s)://`` model specs).

    Args:
        prompt: A string or chat messages.
        **fields: Any `Request` field (``model``, ``max_tokens``, ``stop``, ...).

    Raises:
        GenerationError: The generation ended in error.
    """
    return _submit(prompt, fields)[1].result()  # blocking gathers the same stream


def _submit(prompt, fields: dict):
    """Route ``fields["model"]`` and submit: ``(route, job)`` (`generate` and `stream`)."""
    from .engine.backend import backend_for

    route = backend_for(fields.pop("model", "default"))
    return route, route.backend.submit(Request(prompt, model=route.model, **fields))


def stream(prompt, **fields):
    """Start a generation and return its live handle at once (what ``%%generate -o`` binds).

    Shown in a notebook (a cell's last line, or ``display(h)``), the handle is the live
    view with Stop; anywhere else it works as the blocking API: ``h.text`` waits for
    the end, ``h.partial_text`` does not, ``h.cancel()`` stops it, ``h.job.events()``
    iterates its tokens as they come.

    Args:
        prompt: A string or chat messages.
        **fields: Any `Request` field (``model``, ``max_tokens``, ``stop``, ...).

    Raises:
        ValueError: The request was refused (nothing was queued).
    """
    from .notebook.magics.handle import GenerationHandle, remember

    route, job = _submit(prompt, fields)
    handle = GenerationHandle(job, route.label, route.backend)
    remember(handle)
    return handle


def score(text, prompt=None, *, model: str = "default", **kw):
    """Per-token log-probabilities of ``text`` (or a conversation's last reply), no generation.

    Args:
        text: A string, token ids, or chat messages ending with the assistant reply.
        prompt: Score ``text`` as the reply to this prompt.
        model: A local model spec.
        **kw: ``chat``, ``system``, ``top_k`` (alternatives per token, 0..20; 5).

    Returns:
        A `TokenTable`: records with ``.to_frame()``, ``.perplexity``, ``.mean_logprob``.

    Raises:
        ValueError: A server model (scoring needs the model's logits here), or
            nothing to score.
    """
    from .engine.backend import backend_for

    route = backend_for(model)
    scorer = getattr(route.backend, "score", None)
    if scorer is None:
        raise ValueError(f"score: needs a local model ({model!r} is a server)")
    return scorer(text, prompt, model=route.model, **kw)


def compare(prompt, **kw):
    """Speculative vs normal decoding in interleaved pairs; see `mlx_notebook.measure.compare`."""
    from .measure import compare as _compare

    return _compare(prompt, **kw)


def sweep(prompt, **kw):
    """Draft length k against normal decoding; see `mlx_notebook.measure.sweep`."""
    from .measure import sweep as _sweep

    return _sweep(prompt, **kw)


def map(data, template=None, **kw):  # noqa: A001 - mlx_notebook.map, as in the docs
    """Generate for many prompts (or a template over a DataFrame), batched.

    See `mlx_notebook.mapping.mapper.map`.
    """
    from .mapping.mapper import map as _map

    return _map(data, template, **kw)


def evaluate(data, template, models=None, score=None, epochs=1, **fields):
    """Models and prompt variants over the same rows, scored, with intervals and verdicts.

    See `mlx_notebook.evaluation.evaluate`; built-in scorers are in
    `mlx_notebook.evaluation` (``exact``, ``includes``, ``regex``, ``choice``, ``judge``...).
    """
    from .evaluation import evaluate as _evaluate

    return _evaluate(data, template, models, score, epochs, **fields)


def provenance(path):
    """Every generation saved in a notebook: model hash, sampling, seed, timings (no MLX).

    See `mlx_notebook.origin.provenance`.
    """
    from .origin import provenance as _provenance

    return _provenance(path)


def last():
    """The most recent ``%%generate`` result handle, or None."""
    from .notebook.magics.handle import last_handle

    return last_handle()


def Panel(**traits):  # noqa: N802 - reads as the widget class it returns
    """Create the control panel widget (see `mlx_notebook.notebook.panel.panel.Panel`)."""
    from .notebook.panel.panel import Panel as _Panel

    return _Panel(**traits)


def load_ipython_extension(ipython) -> None:
    """Register ``%%generate`` and ``%mlx`` (imports IPython only now)."""
    from .notebook.hosts import prepare
    from .notebook.magics.generate import load

    load(ipython)
    prepare()  # Colab: its custom widget manager, for the chat window


def unload_ipython_extension(ipython) -> None:
    """Unregister the magics and cancel running jobs."""
    from .notebook.magics.generate import unload

    unload(ipython)
