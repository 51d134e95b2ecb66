"""The thread governor on an injected clock: fewer threads when the cores are taken."""

from mlx_notebook.engine.threads import ThreadGovernor


class Machine:
    """Step times by thread count, changed by the test; the clock advances per step."""

    def __init__(self, times):
        self.times = dict(times)
        self.now = 0.0
        self.set_calls = []

    def clock(self):
        return self.now

    def setter(self, n):
        self.set_calls.append(n)


def run(gov, machine, steps):
    counts = []
    for _ in range(steps):
        machine.now += machine.times[gov.threads]
        gov.step()
        counts.append(gov.threads)
    return counts


def make(machine, **kw):
    gov = ThreadGovernor([machine.setter], 2, clock=machine.clock, **kw)
    gov.step()  # the first call only starts the clock
    return gov


def test_idle_machine_keeps_all_threads_and_probes_less_and_less():
    m = Machine({2: 0.030, 1: 0.050})
    gov = make(m)
    counts = run(gov, m, 2000)
    assert counts[-1] == 2 and gov.switches == 0
    probes = sum(1 for a, b in zip(counts, counts[1:]) if a == 2 and b == 1)
    assert 3 <= probes <= 10  # the period doubles up to 512 steps
    assert counts.count(1) / len(counts) < 0.02  # probing costs little


def test_busy_cores_drop_to_one_thread_and_free_cores_bring_them_back():
    m = Machine({2: 0.030, 1: 0.050})
    gov = make(m)
    run(gov, m, 100)
    assert gov.threads == 2
    m.times = {2: 1.0, 1: 0.08}  # another process takes a core: spinning threads stall
    counts = run(gov, m, 20)
    assert counts.index(1) <= 4 and counts[-1] == 1  # within a window of slow steps
    assert "other processes" in gov.reason
    # While the cores stay busy, a probe of two threads costs one slow step, no more.
    counts = run(gov, m, 600)
    slow = sum(1 for c in counts if c == 2)
    assert 1 <= slow <= 5 and counts[-1] == 1
    m.times = {2: 0.030, 1: 0.050}  # the other process ended
    counts = run(gov, m, 600)
    assert counts[-1] == 2 and gov.reason.startswith("all cores")
    assert m.set_calls  # the libraries were told each time


def test_fixed_count_is_never_changed():
    m = Machine({2: 1.0, 1: 0.01})
    gov = ThreadGovernor([m.setter], 2, clock=m.clock, fixed=2)
    gov.step()
    assert run(gov, m, 100) == [2] * 100 and m.set_calls == [2]


def test_nothing_to_govern_without_libraries_or_a_second_core():
    m = Machine({2: 1.0, 1: 0.01})
    for gov in (ThreadGovernor([], 2, clock=m.clock), ThreadGovernor([m.setter], 1, clock=m.clock)):
        gov.step()
        run(gov, m, 50)
        assert not gov.active and m.set_calls == []


def test_the_engine_reports_its_threads(engine, tiny_dir):
    from mlx_notebook.engine import Request

    engine.submit(Request("Hello", model=tiny_dir, chat=False, max_tokens=8)).result(60)
    (line,) = [n for n in engine.info().notes if n.startswith("threads")]
    assert "of" in line or "nothing to govern" in line
