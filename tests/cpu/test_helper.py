"""The fast path's helper thread (helper.c): every unit runs once, whoever runs it."""

import ctypes
import multiprocessing
import threading
import time

import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the fast path's library, as in the engine
from mlx_notebook.cpu import blas as _blas

pytestmark = pytest.mark.skipif(
    _blas.native_library() is None, reason="the fast path's native library is not loaded"
)

UNIT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)


def _run(n, pause=0.0):
    """Runs n units through the helper; returns how often each ran, and by which threads."""
    lib = _blas.native_library()
    counts, threads = [0] * n, set()
    lock = threading.Lock()

    def unit(_, u):
        if pause:
            time.sleep(pause)  # releases the GIL: the other thread can claim units meanwhile
        with lock:  # at the unit's end: a call that returned early would miss it
            counts[u] += 1
            threads.add(threading.get_ident())

    fn = UNIT(unit)
    lib.mlxnb_helper_run(fn, None, n)
    return counts, threads


def test_every_unit_runs_once_and_the_call_waits_for_them():
    lib = _blas.native_library()
    calls, units = lib.mlxnb_helper_calls(), lib.mlxnb_helper_units()
    counts, threads = _run(64, pause=0.001)
    assert counts == [1] * 64  # none skipped, none twice: all done when the call returns
    assert lib.mlxnb_helper_calls() == calls + 1
    helped = lib.mlxnb_helper_units() - units
    assert 0 <= helped <= 64 and len(threads) == (2 if helped else 1)  # a late helper: none


@pytest.mark.parametrize("runs", [16, 4])  # several rows' products; a decode step's
@pytest.mark.parametrize("tasks", [1, 15, 16, 22, 100])
def test_tasks_go_out_as_runs_of_consecutive_tasks(tasks, runs):
    # mlxnb_helper_runs: at most `runs` units, each a run of consecutive tasks that one
    # thread runs in order (a thread streams long runs of weight rows, as under OpenMP's
    # halves).
    lib = _blas.native_library()
    per = -(-tasks // min(runs, tasks))
    seen, lock = [], threading.Lock()

    def task(_, t):
        time.sleep(0.0005)  # releases the GIL: the helper can claim units meanwhile
        with lock:
            seen.append((t, threading.get_ident()))

    calls, posted = lib.mlxnb_helper_calls(), lib.mlxnb_helper_posted()
    lib.mlxnb_helper_runs(UNIT(task), None, tasks, runs)
    assert lib.mlxnb_helper_calls() == calls + 1
    assert lib.mlxnb_helper_posted() == posted + -(-tasks // per) <= posted + runs
    assert sorted(t for t, _ in seen) == list(range(tasks))  # each task once
    for start in range(0, tasks, per):  # each run: one thread, in order
        run = [(t, who) for t, who in seen if start <= t < start + per]
        assert [t for t, _ in run] == list(range(start, min(start + per, tasks)))
        assert len({who for _, who in run}) == 1


def test_calls_in_a_row_and_empty_calls():
    for n in (1, 2, 7, 0, 3):
        counts, _ = _run(n)
        assert counts == [1] * n


def test_a_second_caller_meanwhile_runs_its_units_alone():
    # One call at a time holds the helper; a call from another thread while it runs does
    # its own units on its own thread instead of waiting or mixing the two.
    lib = _blas.native_library()
    inside, release = threading.Event(), threading.Event()
    first = [0] * 4

    def slow(_, u):
        first[u] += 1
        inside.set()
        release.wait(5)

    fn = UNIT(slow)
    t = threading.Thread(target=lib.mlxnb_helper_run, args=(fn, None, 4))
    t.start()
    assert inside.wait(5)
    calls = lib.mlxnb_helper_calls()
    counts, threads = _run(5)
    assert counts == [1] * 5 and threads == {threading.get_ident()}
    assert lib.mlxnb_helper_calls() == calls  # not posted: it never reached the helper
    release.set()
    t.join(5)
    assert first == [1] * 4


def _child(q):
    counts, _ = _run(16)
    q.put(counts)


def test_a_forked_child_has_a_helper_of_its_own():
    _run(8)  # the parent's helper exists
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert q.get(timeout=5) == [1] * 16


def _cpu_seconds(tid):
    """A thread's user and system CPU time so far (Linux)."""
    import os

    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_held_helper_runs_calls_and_a_hold_left_on_does_not_keep_a_core():
    # mlxnb_helper_hold keeps the helper spinning between calls (a step's layers); one
    # left on by mistake lets it spin for 2 ms, then it sleeps like an idle helper.
    import os

    lib = _blas.native_library()
    _run(4)  # the helper exists
    tid = lib.mlxnb_helper_tid()
    if not tid or not os.path.exists(f"/proc/self/task/{tid}/stat"):
        pytest.skip("no per-thread CPU times here")
    holds = lib.mlxnb_helper_holds()
    governed = ctypes.c_int.in_dll(lib, "mlxnb_thread_count")
    kept, governed.value = governed.value, 1  # the governor's one thread: no hold taken
    try:
        assert lib.mlxnb_helper_hold(1) == 0 and lib.mlxnb_helper_holds() == holds
    finally:
        governed.value = 0  # an earlier engine's governor may have left 1
    assert lib.mlxnb_helper_hold(1) == 1
    try:
        assert lib.mlxnb_helper_held() == 1 and lib.mlxnb_helper_holds() == holds + 1
        for n in (5, 1, 9):  # calls go on as without a hold
            counts, _ = _run(n)
            assert counts == [1] * n
        time.sleep(0.05)  # past the 2 ms spin after the last call
        spent = _cpu_seconds(tid)
        time.sleep(1.0)
        assert _cpu_seconds(tid) - spent < 0.2  # asleep: a spinning helper would take ~1 s
    finally:
        lib.mlxnb_helper_hold(0)
        governed.value = kept
    assert lib.mlxnb_helper_held() == 0
    counts, _ = _run(6)
    assert counts == [1] * 6
