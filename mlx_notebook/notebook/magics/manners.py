"""Notebook manners: the kernel's ■ button stops generations, and ``--help`` always helps.

■ (interrupt the kernel) sends SIGINT. While a cell runs, ipykernel turns it into
`KeyboardInterrupt`, which a blocking wait already turns into a cancel. While the
kernel is idle, ipykernel ignores SIGINT, so a view still streaming after its cell
ended could only be stopped with its own Stop button. The extension chains its
own handler in front of the idle one: it stops every generation of this kernel
(as if each Stop were clicked, keeping the text) and then calls the previous
handler. Unloading the extension puts the previous handler back.

ipykernel swaps handlers around each cell (`pre_handler_hook` saves the idle one,
`post_handler_hook` restores it), so from inside a cell the idle handler is
replaced where ipykernel keeps it, ``kernel.saved_sigint_handler``.
"""

from __future__ import annotations

import logging
import re
import signal
import threading

log = logging.getLogger("mlx_notebook")

_HELP_CELL = re.compile(r"^%%(generate|chat)\b[^\n]*\s(-h|--help)(\s|$)")
_state: dict = {}


def help_cells(lines: list[str]) -> list[str]:
    """An input transformer: ``%%generate --help`` with nothing under it still helps.

    IPython refuses a cell magic with an empty body before the magic runs; a body
    line is added so the magic sees ``--help`` and prints its options.
    """
    if lines and _HELP_CELL.match(lines[0]) and not "".join(lines[1:]).strip():
        return [lines[0].rstrip("\n") + "\n", "help\n"]
    return lines


def stop_everything() -> None:
    """Stop every generation of this process's backends, keeping their text."""
    from ...engine.backend import existing_backends

    for backend in existing_backends():
        try:
            backend.cancel_all()
        except Exception:  # noqa: BLE001 - the others still stop
            log.exception("mlx_notebook: stopping a backend's jobs on interrupt failed")


def _on_interrupt(prev):
    def handler(signum, frame):
        # Engine locks may be held where the signal lands: stop from another thread.
        threading.Thread(target=stop_everything, name="mlx-interrupt", daemon=True).start()
        if callable(prev):
            return prev(signum, frame)
        if prev == signal.SIG_DFL:
            raise KeyboardInterrupt
        return None

    handler.mlx_notebook = True
    return handler


def install(ipython) -> None:
    """Add the help transformer and chain the interrupt handler (kernels only)."""
    cleanup = ipython.input_transformers_cleanup
    if help_cells not in cleanup:
        cleanup.append(help_cells)
    kernel = getattr(ipython, "kernel", None)
    if kernel is None or "sigint" in _state:
        return
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    if hasattr(kernel, "saved_sigint_handler"):  # inside a cell: replace the idle one
        prev = kernel.saved_sigint_handler
        kernel.saved_sigint_handler = _on_interrupt(prev)
    else:
        prev = signal.signal(signal.SIGINT, _on_interrupt(signal.getsignal(signal.SIGINT)))
    _state["sigint"] = (kernel, prev)


def uninstall(ipython) -> None:
    """Undo `install`: the previous idle handler comes back."""
    cleanup = ipython.input_transformers_cleanup
    if help_cells in cleanup:
        cleanup.remove(help_cells)
    saved = _state.pop("sigint", None)
    if saved is None:
        return
    kernel, prev = saved
    if hasattr(kernel, "saved_sigint_handler"):
        kernel.saved_sigint_handler = prev
    elif threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, prev)
