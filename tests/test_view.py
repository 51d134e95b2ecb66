"""The view's refresh clock, without a kernel: real Jobs fed synthetic events."""

import threading
import time

from mlx_notebook.engine import Request
from mlx_notebook.engine.events import Finished, Started, Stats, Token
from mlx_notebook.engine.job import Job
from mlx_notebook.notebook.render import ViewState
from mlx_notebook.notebook.view import generation_view


def test_refreshes_at_most_refresh_hz_and_final_holds_everything():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(fmt="text"), refresh_hz=20).attach(job)
    values = []
    view.html.observe(lambda ch: values.append(time.monotonic()), names="value")
    pieces = [f"tok{i} " for i in range(1500)]

    def produce():  # a worker emitting 1000 tokens/s
        job.emit(Started())
        for i, p in enumerate(pieces):
            job.emit(Token(p, i, False, i))
            time.sleep(0.001)
        job.emit(Finished("".join(pieces), "length", stats=Stats(generation_tokens=1500)))

    t0 = time.monotonic()
    threading.Thread(target=produce).start()
    assert view.wait_rendered(10)
    elapsed = time.monotonic() - t0
    assert view.updates == len(values)
    # An upper bound a busy machine cannot break: the refresh thread waits 1/20 s
    # between refreshes, so slower only means fewer updates.
    assert view.updates <= 20 * elapsed + 2, (view.updates, elapsed)
    assert view.updates >= 2  # it did stream
    assert "tok1499" in view.html.value and "done" in view.html.value
    assert view.stop_button.layout.visibility == "hidden"  # no button to press remains


def test_stop_button_cancels_and_marks_stopped():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(), start_thread=False).attach(job)
    job.emit(Started())
    view.stop_button.click()
    assert job.cancelled and view.stop_button.disabled
    view.refresh()
    assert "stopping" in view.html.value
    job.emit(Finished("partial", "cancelled"))
    view.finish()
    assert "stopped" in view.html.value and "partial" in view.html.value
    # The button keeps its room, hidden: the text does not re-wrap when it goes.
    assert view.widget.children == (view.html, view.stop_button)
    assert view.stop_button.layout.visibility == "hidden"


def test_no_update_when_nothing_changed():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(), start_thread=False).attach(job)
    job.emit(Started())
    view.refresh()
    n = view.updates
    assert not view.refresh() and view.updates == n
