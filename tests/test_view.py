"""The view's refresh clock, without a kernel."""

import threading
import time

from mlx_notebook.engine.events import Finished, Started, Stats, Token
from mlx_notebook.notebook.render import ViewState
from mlx_notebook.notebook.view import GenerationView



def test_refreshes_at_most_refresh_hz_and_final_holds_everything():
    view = GenerationView(ViewState(fmt="text"), refresh_hz=20)
    values = []
    view.html.observe(lambda ch: values.append(time.monotonic()), names="value")
    view._thread = threading.Thread(target=view._loop, daemon=True)
    view._thread.start()
    pieces = [f"tok{i} " for i in range(1500)]
    t0 = time.monotonic()
    view.push(Started())
    for i, p in enumerate(pieces):  # 1000 tokens/s from a producer thread's point of view
        view.push(Token(p, i, False, i))
        time.sleep(0.001)
    view.push(Finished("".join(pieces), "length", stats=Stats(generation_tokens=1500)))
    assert view.wait_rendered(5)
    elapsed = time.monotonic() - t0
    assert view.updates == len(values)
    assert view.updates <= 20 * elapsed + 2, (view.updates, elapsed)
    assert view.updates >= 5  # it did stream
    assert "tok1499" in view.html.value and "done" in view.html.value
    assert view.stop_button.disabled and view.stop_button.description == "Done"


def test_stop_button_cancels_and_marks_stopped():
    cancelled = []
    view = GenerationView(ViewState(), start_thread=False)
    view._on_stop = lambda: cancelled.append(True)
    view.stop_button.click()
    assert cancelled == [True] and view.stop_button.disabled
    view.refresh()
    assert "stopping" in view.html.value
    view.push(Finished("partial", "cancelled"))
    view.refresh()
    assert "stopped" in view.html.value and "partial" in view.html.value
    assert view.stop_button.description == "Stopped"


def test_no_update_when_nothing_changed():
    view = GenerationView(ViewState(), start_thread=False)
    view.push(Started())
    view.refresh()
    n = view.updates
    assert not view.refresh() and view.updates == n
