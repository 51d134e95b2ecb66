"""The view's refresh clock, without a kernel: real Jobs fed synthetic events."""

import threading
import time

from mlx_notebook.engine import Request
from mlx_notebook.engine.events import Finished, Started, Stats, Token
from mlx_notebook.engine.job import Job
from mlx_notebook.notebook.views.render import ViewState
from mlx_notebook.notebook.views.view import generation_view


def test_refreshes_at_most_refresh_hz_and_final_holds_everything():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(fmt="text"), refresh_hz=20).attach(job)
    values = []
    send = view.live.send
    view.live.send = lambda msg: (values.append(time.monotonic()), send(msg))
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
    assert "tok1499" in view.live.value and "done" in view.live.value
    assert view.live.ended  # no button to press remains


def test_stop_button_cancels_and_marks_stopped():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(), start_thread=False).attach(job)
    job.emit(Started())
    view.live.click("stop")
    assert job.cancelled and view.live.stopping
    view.refresh()
    assert "stopping" in view.live.value
    job.emit(Finished("partial", "cancelled"))
    view.finish()
    assert "stopped" in view.live.value and "partial" in view.live.value
    assert view.live.ended  # the buttons hide (the script keeps their room)


def test_no_update_when_nothing_changed():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(), start_thread=False).attach(job)
    job.emit(Started())
    view.refresh()
    n = view.updates
    assert not view.refresh() and view.updates == n


def test_inspect_toggle_shows_once_tokens_carry_records_and_switches_the_text():
    from mlx_notebook.engine.token_records import TokenRecord

    job = Job(Request("x"), 1)
    view = generation_view(ViewState(fmt="text"), start_thread=False).attach(job)
    job.emit(Started())
    job.emit(Token("plain ", 5, False, 0))
    view.refresh()
    assert not view.live.can_inspect  # nothing recorded: no toggle
    rec = TokenRecord(1, 6, "<b>odd</b>", -3.0, 4, 2.0, (("x", 7, -0.1),), "model", -3.0)
    job.emit(Token("<b>odd</b>", 6, False, 1, info=rec))
    view.refresh()
    assert view.live.can_inspect and not view.live.inspecting
    assert 'class="tk b' not in view.live.value
    view.live.click("inspect")  # the text comes back tinted
    assert 'class="tk b4"' in view.live.value and "&lt;b&gt;odd" in view.live.value
    view.live.click("inspect")
    assert 'class="tk b' not in view.live.value
    job.emit(Finished("plain <b>odd</b>", "stop"))
    view.finish()
    # The document keeps the inspection one click away (a <details>, no script).
    assert view.live.value.count('<details class="insp-fold">') == 1
    assert "inspect 1 token</summary>" in view.live.value and "<b>odd" not in view.live.value
    assert view.live.ended


def test_stop_thinking_shows_while_reasoning_and_asks_the_job():
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(), start_thread=False).attach(job)
    job.emit(Started())
    view.refresh()
    assert not view.live.can_end_thinking
    job.emit(Token("", 5, False, 0, reasoning="Rivers"))
    view.refresh()
    assert view.live.can_end_thinking and not job.thinking_ended
    view.live.click("think")
    assert job.thinking_ended and view.live.thinking_ended
    job.emit(Token(" Paris", 6, False, 1))
    view.refresh()
    assert not view.live.can_end_thinking  # the answer has begun


def test_the_final_refresh_renders_state_that_changed_after_the_last_event():
    # A Sweep's verdict needs its pacing to have ended, which comes after the last
    # run's Finished: the final refresh must render again although no event is new.
    from mlx_notebook.notebook.views.view import LiveView

    class Verdict:
        final = False

        def apply_from(self, index, ev):
            pass

        def html(self):
            return "verdict" if self.final else "running"

        def plain(self):
            return self.html()

    renderer = Verdict()
    job = Job(Request("x"), 1)
    view = LiveView(renderer, start_thread=False).attach(job, sealed=False)
    job.emit(Started())
    job.emit(Finished("", "length"))
    view.refresh()
    assert view.live.value == "running"  # every event is rendered
    renderer.final = True  # pacing ends: no event says so
    view.seal()
    view.finish()
    assert view.live.value == "verdict"


def test_a_view_shown_after_its_jobs_ended_shows_and_saves_the_final_text(ipshell):
    # `%%generate --compare` starts its runs, then displays the view: a run that ends
    # first must still leave the final document, not a live widget with no ending.
    job = Job(Request("x"), 1)
    view = generation_view(ViewState(fmt="text")).attach(job)
    job.emit(Started())
    job.emit(Token("all done ", 0, False, 0))
    job.emit(Finished("all done ", "length", stats=Stats(generation_tokens=1)))
    assert view.wait_rendered(10) and view.document is None
    view.display()
    assert view.document.final is not None
    assert "all done" in view.document.final["text/plain"]


def test_jobs_that_ended_before_the_view_followed_them_end_it_only_all_together():
    # A replayed --over table: every row has ended before `attach` adds the first.
    # Each pushes its Finished as it joins; the view must wait for the last one.
    from mlx_notebook.notebook.views.view import LiveView, StatesRenderer

    jobs = [Job(Request("x"), i) for i in range(5)]
    for i, job in enumerate(jobs):
        job.emit(Started())
        job.emit(Token(f"row{i}", 0, False, 0))
        job.emit(Finished(f"row{i}", "length", stats=Stats(generation_tokens=1)))
    states = [ViewState(fmt="text") for _ in jobs]
    done_with = []

    class All(StatesRenderer):
        def html(self):
            return "".join(s.text for s in self.states)

    view = LiveView(All(states), start_thread=False)
    view._done.set = lambda: done_with.append(len(view._jobs))  # who ended it, when
    view.attach(*jobs)
    assert done_with == [5]  # once, with every job in the view
