"""Job event log: cursors, listener replay order, terminal event."""

import threading
import time

from mlx_notebook.engine import Request
from mlx_notebook.engine.events import Finished, Queued, Started, Token
from mlx_notebook.engine.job import Job


def test_late_listener_gets_every_event_in_order_while_events_keep_coming():
    job = Job(Request("x"), 1)
    job.emit(Started())
    for i in range(50):  # already emitted: these are replayed on attach
        job.emit(Token(str(i), i, False, i))
    go = threading.Event()

    def produce():
        go.wait()
        for i in range(50, 300):
            job.emit(Token(str(i), i, False, i))
        job.emit(Finished("", "length"))

    t = threading.Thread(target=produce)
    t.start()
    seen = []

    def slow_listener(ev):
        if isinstance(ev, Token):
            if ev.index == 0:
                go.set()  # the producer runs while the replay is still going
            time.sleep(0.001)
            seen.append(ev.index)

    job.add_listener(slow_listener)
    t.join()
    assert seen == list(range(300))


def test_single_terminal_event_and_independent_cursors():
    job = Job(Request("x"), 1)
    job.emit(Queued(0))
    job.emit(Started())
    job.emit(Queued(3))  # late position update: dropped
    job.emit(Finished("a", "length"))
    job.emit(Finished("b", "cancelled"))  # ignored
    a, b = list(job.events()), list(job.events())
    assert a == b and [type(e) for e in a] == [Queued, Started, Finished]
    assert job.finished.text == "a" and job.position is None
