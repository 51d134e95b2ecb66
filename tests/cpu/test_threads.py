"""The thread governor on an injected clock: fewer threads when the cores are taken."""

from mlx_notebook.cpu.threads import ThreadGovernor


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


def test_a_process_first_slow_steps_do_not_make_one_thread_look_faster():
    m = Machine({2: 0.020, 1: 0.022})  # idle cores: two threads a little faster
    gov = make(m)
    m.times = {2: 0.040, 1: 0.040}  # the process's first steps: buffers, page faults
    counts = run(gov, m, 3)
    m.times = {2: 0.020, 1: 0.022}
    counts += run(gov, m, 300)
    assert counts[-1] == 2 and gov.switches == 0 and 1 in counts  # probed, and kept 2


def test_a_probe_in_progress_is_dropped_when_decoding_pauses():
    m = Machine({2: 0.030, 1: 0.050})
    gov = make(m)
    counts = run(gov, m, 6)  # warm-up steps, then a window: the first probe starts
    assert counts[-1] == 1 and gov.threads == 1  # a probe of one thread is under way
    assert gov.line().startswith("threads: 2 of 2 (all cores") and "trying 1" in gov.line()
    gov.reset()  # the request ended (or a prefill starts) mid-probe
    assert gov.threads == 2 and m.set_calls[-1] == 2  # not left on the probe's count
    assert gov.line() == "threads: 2 of 2 (all cores: steps are fastest so)"
    assert gov.switches == 0 and "all cores" in gov.reason
    counts = run(gov, m, 200)  # decoding again: probes come back, and still lose
    assert 1 in counts and counts[-1] == 2 and gov.switches == 0
    gov.reset()  # no probe in progress: nothing changes
    assert gov.threads == 2 and m.set_calls[-1] == 2
    for _ in range(1000):  # to the next probe
        run(gov, m, 1)
        if gov.threads == 1:
            break
    gov.prefill_chunk()  # a prefill chunk is a pause too
    assert gov.threads == 2 and m.set_calls[-1] == 2 and gov.switches == 0


def test_a_library_loaded_later_is_governed_from_the_current_count():
    m = Machine({2: 0.030, 1: 0.050})
    gov = make(m)
    run(gov, m, 50)
    m.times = {2: 1.0, 1: 0.08}
    run(gov, m, 20)
    assert gov.threads == 1
    late = Machine({})
    gov.add_setter(late.setter)  # the quantized products' library, with a 4-bit model
    assert late.set_calls == [1]
    m.times = {2: 0.030, 1: 0.050}
    run(gov, m, 600)
    assert gov.threads == 2 and late.set_calls[-1] == 2  # told of every change since


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


def test_a_prefill_chunk_beside_busy_processes_drops_to_the_free_cores():
    m = Machine({1: 0.03, 2: 0.01})
    readings = iter([None, 0.1, 1.1, 0.0])  # first call: no window yet
    gov = ThreadGovernor([m.setter], 2, clock=m.clock, meter=lambda: next(readings))
    gov.prefill_chunk()
    gov.prefill_chunk()  # a tenth of a core: idle enough
    assert gov.threads == 2 and m.set_calls == []
    gov.prefill_chunk()  # a busy loop beside it
    assert gov.threads == 1 and m.set_calls == [1]
    assert "other processes are using the cores (1.1 cores' worth" in gov.reason
    gov.prefill_chunk()  # never up again from prefill: decode steps probe their way back
    assert gov.threads == 1
    fixed = ThreadGovernor([m.setter], 2, clock=m.clock, fixed=2, meter=lambda: 2.0)
    fixed.prefill_chunk()
    assert fixed.threads == 2  # MLX_NOTEBOOK_THREADS=N is never changed


def test_the_meter_reads_other_processes_cpu_from_proc():
    from mlx_notebook.cpu.threads import others_cores

    # user nice system idle iowait irq softirq steal guest guest_nice; utime, stime of ours
    mine_last = "1 (py thon) S " + "0 " * 10 + "90 20"
    stats = iter(["cpu 100 0 50 1000 10 0 0 0 0 0", "cpu 101 0 50 1000 10 0 0 0 0 0",
                  "cpu 260 0 90 1100 10 0 0 50 0 0"])  # fmt: skip
    mine = iter(["1 (py thon) S " + "0 " * 10 + "40 10"] * 2 + [mine_last])
    times = iter([0.0, 0.01, 1.0])
    meter = others_cores(lambda: next(stats), lambda: next(mine), lambda: next(times))
    assert meter() is None  # no window yet
    assert meter() is None  # 10 ms: too short to read ticks from; the window goes on
    hz = __import__("os").sysconf("SC_CLK_TCK")
    # busy went 150 -> 400 ticks (250), ours 50 -> 110 (60): 190 ticks of others in 1 s
    assert abs(meter() - 190 / hz) < 1e-9
    broken = others_cores(lambda: (_ for _ in ()).throw(OSError()), lambda: "", lambda: 0.0)
    assert broken() is None


def test_idle_cores_by_the_meter_skip_the_probes_and_busy_ones_do_not():
    m = Machine({2: 0.030, 1: 0.050})
    reads = []

    def meter(value):
        def read():
            reads.append(value)
            return value

        return read

    quiet = make(m, meter=meter(0.1))  # a tenth of a core used by others
    counts = run(quiet, m, 2000)
    assert counts.count(1) == 0 and reads  # no probe: the meter was read instead
    busy = make(m, meter=meter(1.2))  # another process on a core: probes go on
    counts = run(busy, m, 2000)
    probes = sum(1 for a, b in zip(counts, counts[1:]) if a == 2 and b == 1)
    assert probes >= 3
    # A slowdown probes whatever the meter says (the meter reads a long window).
    m.times = {2: 1.0, 1: 0.08}
    counts = run(quiet, m, 20)
    assert counts[-1] == 1


def test_a_window_too_short_to_read_defers_the_probe_a_step():
    m = Machine({2: 0.030, 1: 0.050})
    readings = iter([0.0] + [None] * 5 + [1.0] * 100)
    gov = make(m, meter=lambda: next(readings))
    gov.prefill_chunk()  # the meter reads a window: it works here
    counts = run(gov, m, 20)
    first = counts.index(1)
    assert first == 3 + 3 + 5  # warmup, a window, then five short windows deferred it
