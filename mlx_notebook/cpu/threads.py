"""Thread counts that follow the machine: fewer when other processes take the cores.

OpenBLAS's and OpenMP's worker threads wait for each other by spinning. When
another process holds a core, a thread spins while the one it waits for is not
running, and a decode step can take 30x as long. The governor times decode
steps on the worker thread and tries the other thread count now and then: when
the steps slow down beyond the recent best (the cores got busy), and otherwise
at a period that doubles each time the current count wins. It keeps whichever
count steps faster, so it drops to one thread under contention and goes back
to all of them when the cores free up. Where it can read other processes' CPU
time (Linux's ``/proc``), it skips the probes of fewer threads while the cores
are idle: they only cost steps there. Only the CPU libraries this package
loads are touched (OpenBLAS, the fast path's kernel), so on Metal it does nothing.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence

from .. import config
from . import ext as _ext

ENV = "MLX_NOTEBOOK_THREADS"  # "auto" (default), or a fixed count such as "1" or "2"


class ThreadGovernor:
    """Picks the thread count of the CPU libraries from measured step times.

    Call `step` once per decode step (a batched step or a verify pass) on the
    thread that runs MLX. Steps of different work (a new batch size, a longer
    context) only shift the baseline slowly, since every decision compares a
    short probe with the steps just before it.

    Args:
        setters: Functions ``f(n)`` setting each library's thread count.
        most: The largest count (the cores this process may use).
        sync: Called before a change, so no product is in flight (``mx.synchronize``).
        clock: Seconds (tests inject one).
        window: Steps timed per side of a comparison.
        period: Steps between probes at first; doubles while the current count
            keeps winning, up to ``max_period``.
        slowdown: A step median this many times the best seen for the current
            count starts a probe at once.
        abort: A probe step this many times the steps before it ends the probe.
        fixed: A fixed count (``MLX_NOTEBOOK_THREADS=N``): never change it.
        meter: Cores' worth of other processes' CPU time since its last call
            (`others_cores`), or None where unknown; read around prefill chunks.
    """

    def __init__(
        self,
        setters: Sequence[Callable[[int], object]],
        most: int,
        sync: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.perf_counter,
        window: int = 3,
        period: int = 32,
        max_period: int = 512,
        slowdown: float = 1.6,
        abort: float = 1.5,
        fixed: int | None = None,
        meter: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.setters, self.most, self.sync, self.clock = list(setters), max(1, most), sync, clock
        self.window, self.base_period, self.max_period = window, period, max_period
        self.slowdown, self.abort = slowdown, abort
        self.fixed = fixed
        self.threads = fixed or self.most
        self.reason = "fixed by " + ENV if fixed else "all cores: steps are fastest so"
        self.switches = 0
        self.meter = meter
        self._last: float | None = None
        self._recent: list[float] = []  # step times at the current count
        self._best: dict[int, float] = {}  # best window median seen per count
        self._probe: list[float] | None = None  # step times of a probe in progress
        self._before: float | None = None  # the median the probe is compared with
        self._period = window  # the first probe comes after the first window
        self._since = 0
        # A process's first steps are slow (buffers allocated, pages touched): a baseline
        # taken from them made one thread look 1.3-1.9x faster on idle cores.
        self._warmup = window
        self._metered = False  # whether the meter has ever read a window (`_idle_others`)
        if fixed:
            self._apply(fixed)

    @property
    def active(self) -> bool:
        """Whether there is anything to govern (libraries loaded, more than one core)."""
        return bool(self.setters) and self.most > 1 and not self.fixed

    def add_setter(self, setter: Callable[[int], object]) -> None:
        """Govern one more library, starting at the current count."""
        self.sync()
        setter(self.threads)
        self.setters.append(setter)

    def line(self) -> str:
        """``threads: 2 of 2 (why)``, naming a probe in progress."""
        if self._probe is not None:
            return (
                f"threads: {self._home} of {self.most} ({self.reason}); "
                f"trying {self.threads} for a few steps"
            )
        return f"threads: {self.threads} of {self.most} ({self.reason})"

    def _apply(self, n: int) -> None:
        self.sync()  # nothing in flight: the next step is the first with n threads
        for f in self.setters:
            f(n)
        self.threads = n
        self._last = self.clock()

    def reset(self) -> None:
        """Decoding pauses (idle, a prefill chunk): forget the last step's time.

        A probe in progress is dropped and its count goes back to the one it left:
        a probe compares decode steps, and a prefill or the next request must not
        run on a count that was only being tried. It is tried again after a period.
        """
        if self._probe is not None:
            self._apply(self._home)  # first: `line()` on another thread reads these
            self._probe, self._recent = None, []
        self._last = None

    PREFILL_OTHERS = 0.5  # cores' worth of other processes' work that makes prefill yield

    def prefill_chunk(self) -> None:
        """Call before a prefill's first chunk and after each: yield cores others use.

        Prefill chunks are not decode steps and are not probed; a chunk with all
        threads while other processes hold cores can take 30x as long (threads
        spin waiting for each other). So around each chunk the meter says how
        much CPU other processes took meanwhile; past half a core, the count
        drops by the cores they use (decode steps probe their way back up).
        A chunk is a pause in decoding (`reset`).
        """
        self.reset()
        others = self.meter()
        self._metered = self._metered or others is not None
        if others is None or not self.active or others < self.PREFILL_OTHERS:
            return
        n = max(1, self.most - math.ceil(others - 0.25))  # a busy loop reads as ~1 core
        if n >= self.threads:
            return
        self._probe, self._recent = None, []
        self._best.clear()
        self._period = self.base_period
        self._apply(n)
        self.switches += 1
        self.reason = (
            f"{n} thread{'s' * (n != 1)}: other processes are using the cores "
            f"({others:.1f} cores' worth during a prefill chunk)"
        )

    def step(self) -> None:
        """Note that a decode step ended now; maybe change the thread count."""
        now = self.clock()
        last, self._last = self._last, now
        if last is None or not self.active:
            return
        dt = now - last
        if self._warmup > 0:  # not timed: see __init__
            self._warmup -= 1
            return
        if self._probe is not None:
            self._probe.append(dt)
            # One slow step ends a probe at once. Trying all threads while the cores are
            # taken costs seconds a step, so never more than one; and one thread only
            # helps when the cores are taken, when it is many times faster at once, so a
            # step of one thread that is not even 10% faster ends that probe too.
            limit = self._before / 1.1 if self.threads < self._home else self.abort * self._before
            if dt > limit or len(self._probe) >= self.window:
                self._end_probe()
            return
        self._recent = (self._recent + [dt])[-self.window :]
        self._since += 1
        if len(self._recent) < self.window:
            return
        med = statistics.median(self._recent)
        best = self._best.get(self.threads)
        self._best[self.threads] = med if best is None else min(best, med)
        slowed = best is not None and med > self.slowdown * best
        if slowed or self._since >= self._period:
            if not slowed and self.threads == self.most and self._idle_others() is not False:
                return
            self._start_probe(med, slowed)

    def _idle_others(self) -> bool | None:
        """Whether a due probe of fewer threads can be skipped: the meter says so.

        A probe costs a slow step or two. Fewer threads only win while other
        processes hold the cores, which the meter reads directly: with less than
        `PREFILL_OTHERS` of a core used by others since its last read, the probe
        is skipped (True; the period starts over). A window too short to read
        defers it a step (None). False: probe (busy cores, or no meter here).
        """
        others = self.meter()
        if others is None:
            if not self._metered:
                return False  # never read (no /proc): probing is the only way to know
            return None  # `_since` stays due: the next step reads a longer window
        self._metered = True
        if others >= self.PREFILL_OTHERS:
            return False
        self._since = 0
        return True

    def _start_probe(self, before: float, slowed: bool) -> None:
        self._before = before
        self._probe = []
        self._since = 0
        if slowed:  # the cores got busy or free: what we knew is stale
            self._best.clear()
            self._period = self.base_period
        self._home = self.threads
        self._apply(1 if self.threads > 1 else self.most)

    def _end_probe(self) -> None:
        probe = statistics.median(self._probe)
        self._probe, self._recent = None, []
        # Fewer threads must win clearly (contention makes all threads several times
        # slower); going back up needs less, since idle cores favour all threads.
        need = 1.25 if self.threads < self._home else 1.05
        if probe * need < self._before:  # clearly faster: keep it
            self.switches += 1
            self._period = self.base_period
            self.reason = (
                "one thread: other processes are using the cores "
                f"(steps {self._before / probe:.1f}x faster alone)"
                if self.threads == 1
                else "all cores: steps are fastest so"
            )
        else:  # go back, and look again later
            self._apply(self._home)
            # After the quick first look, every later one waits at least `period` steps.
            self._period = min(self.max_period, max(self.base_period, self._period * 2))


MIN_WINDOW_S = 0.1  # the shortest window the meter judges (ticks are 1/100 s)


def others_cores(
    read_stat=lambda: open("/proc/stat").readline(),
    read_self=lambda: open("/proc/self/stat").read(),
    clock=time.monotonic,
) -> Callable[[], float | None]:
    """A meter: cores' worth of CPU time other processes used since its last call.

    Linux's ``/proc``: the machine's busy ticks (steal included: another
    guest's) minus this process's own. None on the first call, and wherever
    ``/proc`` cannot be read (macOS: on Metal nothing is governed anyway).
    """
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    last: list = []

    def read() -> tuple[float, float, float] | None:
        try:
            f = [int(x) for x in read_stat().split()[1:]]
            me = read_self().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            return None
        busy = sum(f) - f[3] - (f[4] if len(f) > 4 else 0)  # all but idle and iowait
        if len(f) > 9:
            busy -= f[8] + f[9]  # guest time is counted in user time already
        return busy, int(me[11]) + int(me[12]), clock()  # utime + stime

    def meter() -> float | None:
        now = read()
        if now is None:
            return None
        before = last[0] if last else None
        if before is not None and now[2] - before[2] < MIN_WINDOW_S:
            return None  # ticks are 10 ms: a shorter window reads noise; keep counting
        last[:] = [now]
        if before is None:
            return None
        return max(0.0, (now[0] - before[0]) - (now[1] - before[1])) / hz / (now[2] - before[2])

    return meter


_governor: ThreadGovernor | None = None


def governor() -> ThreadGovernor:
    """The process's governor, made on first use (on the MLX worker thread)."""
    global _governor
    if _governor is None:
        from . import blas as _blas

        setting = config.get(ENV).lower()
        fixed = int(setting) if setting.isdigit() and int(setting) > 0 else None
        try:
            import mlx.core as mx

            cpu = mx.default_device().type == mx.DeviceType.cpu
            sync = mx.synchronize
        except Exception:  # no MLX: nothing to govern
            cpu, sync = False, lambda: None
        setters = _blas.thread_setters() if cpu else []
        most = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        _governor = ThreadGovernor(
            setters, most, sync=sync, fixed=fixed if setters else None, meter=others_cores()
        )
    quant = _ext.thread_setter()  # the fast path's extension, loaded with a CPU model
    if quant is not None and _governor.setters and quant not in _governor.setters:
        _governor.add_setter(quant)
    return _governor


def describe() -> str:
    """One line for ``%mlx status``: threads in use and why."""
    g = _governor
    if g is None:
        return "threads: not yet decided (no generation yet)"
    if not g.setters:
        return "threads: the GPU or MLX's own defaults (nothing to govern here)"
    return g.line()
