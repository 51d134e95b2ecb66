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


def test_queue_positions_never_increase():
    seen = []
    job2 = Job(Request("x"), 2)
    job2.add_listener(lambda ev: seen.append(ev.position))
    for p in [9, 8, 7, 6, 5, 4, 3, 1, 2]:  # emitted out of order, as a race can
        job2.emit(Queued(p))
    assert seen == [9, 8, 7, 6, 5, 4, 3, 1]
    assert job2.position == 1


def test_a_listener_that_raises_during_replay_keeps_receiving_events():
    job = Job(Request("x"), 1)
    job.emit(Started())
    job.emit(Token("a", 1, False, 0))
    seen = []

    def flaky(ev):
        seen.append(type(ev).__name__)
        if isinstance(ev, Started):
            raise ValueError("boom")

    job.add_listener(flaky)
    job.emit(Token("b", 2, False, 1))
    job.emit(Finished("ab", "length"))
    assert seen == ["Started", "Token", "Token", "Finished"]


def test_producer_side_is_public_with_a_cancel_hook():
    hooked = []
    job = Job(Request("x"), 7, on_cancel=hooked.append)
    job.cancel()
    job.cancel()
    assert hooked == [job] and job.cancelled
    job.emit(Finished("", "cancelled"))
    assert job.done and job.text == ""


def test_with_block_cancels_an_unfinished_job():
    job = Job(Request("x"), 1)
    with job:
        pass
    assert job.cancelled
