"""Sampling's row work on the CPU fast path (``argmax.c``, ``sample.c``): the greedy pick,
logsumexp and the nucleus filter equal MLX's and mlx-lm's bit for bit on every shape and
edge (ties, NaNs, infinities), and the engine's steps take them."""

import math

import mlx.core as mx
import numpy as np
import pytest

import mlx_notebook  # OpenBLAS and the shim first, as in the engine
import mlx_notebook.cpu
from mlx_notebook.cpu import ext as _ext
from mlx_notebook.engine import Request
from mlx_notebook.engine.decoding import sampling


@pytest.fixture(scope="module")
def ext():
    mod = _ext.load()
    assert mod is not None, _ext.status()  # built here: gcc, g++ and nanobind are installed
    return mod


def _bits(a):
    return np.array(a, dtype=np.float32).view(np.uint32)


def _same(ext, x):
    before = ext.argmax_calls()
    got = sampling.argmax(x)
    want = mx.argmax(x, axis=-1)
    assert got.dtype == want.dtype == mx.uint32 and got.shape == want.shape
    assert got.tolist() == want.tolist()
    assert ext.argmax_calls() == before + 1  # the kernel, not mx.argmax


# 49152: the default model's vocabulary; 100 and 70: vector blocks plus a tail; 5 and 1:
# shorter than one block (the scalar scan).
@pytest.mark.parametrize("shape", [(1, 49152), (16, 49152), (3, 100), (2, 5), (1, 1), (2, 3, 70)])
def test_random_rows_give_mlx_argmax_indices(ext, shape):
    _same(ext, mx.random.normal(shape, key=mx.random.key(sum(shape))))


def test_views_are_read_as_their_values(ext):
    x = mx.random.normal((6, 300), key=mx.random.key(3))
    _same(ext, x[:, ::3])  # strided
    _same(ext, x.T)  # transposed
    _same(ext, x[1:4, 40:])  # sliced


def _rows(n, cases):
    x = np.zeros((len(cases), n), dtype=np.float32)
    for r, (fill, marks) in enumerate(cases):
        x[r] = fill
        for i, v in marks.items():
            x[r, i] = v
    return mx.array(x)


@pytest.mark.parametrize("n", [5, 64, 200, 49152])
def test_ties_nans_and_infinities_pick_what_mlx_picks(ext, n):
    """The first index of the maximum, whichever lane and block holds it; the first NaN
    wherever one is (in the vector body or the tail); rows of -inf give index 0."""
    inf, nan, last = math.inf, math.nan, n - 1
    cases = [
        (0.0, {1: 3.0, last: 3.0}),  # a tie: the first
        (0.0, {last: 3.0, 2: 3.0, 3: 3.0}),  # ties in neighbouring lanes
        (-1.0, {}),  # all equal: index 0
        (-inf, {}),  # all -inf: index 0
        (0.0, {last: inf, 1: 5.0}),  # +inf last
        (0.0, {2: nan, 0: 9.0}),  # a NaN beats a larger number
        (0.0, {last: nan, 1: 9.0}),  # a NaN in the tail (or last lane)
        (0.0, {3: nan, last: nan}),  # the first of two NaNs
        (-inf, {last: nan}),
    ]
    if n > 64:
        cases += [
            (0.0, {17: 4.0, 81: 4.0, 33: 4.0}),  # equal values in different accumulators
            (0.0, {n - 3: 4.0, 5: 2.0}),  # the maximum in the tail alone
        ]
    _same(ext, _rows(n, cases))


def test_other_dtypes_and_devices_take_mlx_argmax(ext, monkeypatch):
    x = mx.random.normal((2, 300), key=mx.random.key(5))
    before = ext.argmax_calls()
    assert sampling.argmax(x.astype(mx.bfloat16)).tolist() == mx.argmax(x, axis=-1).tolist()
    monkeypatch.setattr(sampling.mx, "default_device", lambda: mx.gpu)
    assert sampling.argmax(x).tolist() == mx.argmax(x, axis=-1).tolist()
    assert ext.argmax_calls() == before  # neither took the kernel


def test_the_pick_stays_in_the_lazy_graph(ext):
    x = mx.random.normal((4, 1000), key=mx.random.key(6))
    mx.eval(x)
    before = ext.argmax_calls()
    y = sampling.argmax(x * 2)
    assert ext.argmax_calls() == before  # built, not run
    mx.eval(y)
    assert ext.argmax_calls() == before + 1


def test_greedy_steps_solo_batched_and_speculative_take_the_kernel(ext, engine, tiny_dir):
    def run(**kw):
        before = ext.argmax_calls()
        r = engine.submit(Request("The quick brown fox", model=tiny_dir, chat=False, **kw))
        return r.result(timeout=120), ext.argmax_calls() - before

    solo, picks = run(max_tokens=12, batch=False)
    assert picks >= 12  # one pick per step (the first from the prefill's logits)
    spec, picks = run(max_tokens=12, batch=False, draft="lookup", num_draft_tokens=3)
    assert spec.token_ids == solo.token_ids and picks >= 1
    before = ext.argmax_calls()
    jobs = [
        engine.submit(Request(p, model=tiny_dir, chat=False, max_tokens=12))
        for p in ("The quick brown fox", "Hello world", "Rivers flow")
    ]
    batched = [j.result(timeout=120) for j in jobs]
    assert max(r.stats.batch_rows for r in batched) >= 2 and ext.argmax_calls() > before
    assert batched[0].token_ids == solo.token_ids


@pytest.mark.parametrize("flags", [["-mavx2", "-mfma"], ["-mno-avx"]], ids=["avx2", "scalar"])
def test_the_avx2_and_scalar_builds_pick_the_same(tmp_path, flags):
    """This machine builds the AVX-512 kernel; CPUs with AVX2 alone, or neither, build
    these."""
    import ctypes
    import platform
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs a C compiler for x86-64")
    src = Path(mlx_notebook.cpu.__file__).parent / "csrc" / "kernels" / "argmax.c"
    lib_path = tmp_path / "argmax.so"
    subprocess.run([cc, "-O2", *flags, "-shared", "-fPIC", "-o", lib_path, src], check=True)
    lib = ctypes.CDLL(str(lib_path))
    u32 = ctypes.POINTER(ctypes.c_uint32)
    f32 = ctypes.POINTER(ctypes.c_float)
    lib.mlxnb_argmax_rows.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long, f32, u32]
    inf, nan = math.inf, math.nan
    for n in (5, 40, 200, 49152):
        last = n - 1
        x = _rows(
            n,
            [
                (0.0, {1: 3.0, last: 3.0}),
                (-inf, {}),
                (0.0, {2: nan, 0: 9.0}),
                (0.0, {last: nan, 1: 9.0}),
                (0.0, {n // 2: 4.0, n // 3: 4.0}),
            ],
        )
        x = mx.concatenate([x, mx.random.normal((3, n), key=mx.random.key(n))])
        a = np.ascontiguousarray(np.array(x))
        out = np.zeros(a.shape[0], dtype=np.uint32)
        lib.mlxnb_argmax_rows(a.shape[0], n, n, a.ctypes.data_as(f32), out.ctypes.data_as(u32))
        assert out.tolist() == mx.argmax(x, axis=-1).tolist(), n


def _logit_rows(seed, n=49152):
    """Rows as a model's logits vary: peaked and flat, masked (-inf), and ties."""
    key = mx.random.key(seed)
    rows = [
        mx.random.normal((n,), key=mx.random.key(seed + i)) * s for i, s in enumerate((0.5, 3, 12))
    ]
    rows.append(mx.where(mx.random.uniform(shape=(n,), key=key) < 0.5, -math.inf, rows[1]))
    rows.append(mx.round(rows[1] * 2) / 2)  # few distinct values: many ties
    return mx.stack(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logsumexp_is_mlx_bit_for_bit(ext, seed):
    x = _logit_rows(seed)
    before = ext.sample_calls(0)
    got = sampling.logsumexp(x)
    mx.eval(got)
    assert got.shape == (5, 1) and ext.sample_calls(0) == before + 5
    assert np.array_equal(_bits(got), _bits(mx.logsumexp(x, axis=-1, keepdims=True)))
    inf, nan = math.inf, math.nan
    odd = _rows(70, [(-inf, {}), (0.0, {3: inf}), (0.0, {5: nan}), (-inf, {9: 2.0})])
    for y in (odd, x[:2, :5], x[:1, :1], mx.random.normal((2, 3, 300), key=mx.random.key(seed))):
        want = mx.logsumexp(y, axis=-1, keepdims=True)
        assert np.array_equal(_bits(sampling.logsumexp(y)), _bits(want), equal_nan=True)


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.99])
def test_the_nucleus_filter_is_mlx_lms_bit_for_bit(ext, p):
    from mlx_lm.sample_utils import apply_top_p

    x = _logit_rows(int(p * 100))
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    before = ext.sample_calls(1)
    got = sampling.apply_top_p(lp, p)
    mx.eval(got)
    assert ext.sample_calls(1) == before + lp.shape[0]
    assert np.array_equal(_bits(got), _bits(apply_top_p(lp, p)))
    kept = np.isfinite(np.array(got)).sum(axis=-1)
    assert kept.min() >= 1 and kept.max() < lp.shape[1]  # it filtered, and kept some
    small = mx.random.normal((2, 3, 40), key=mx.random.key(7)) * 4
    assert np.array_equal(_bits(sampling.apply_top_p(small, p)), _bits(apply_top_p(small, p)))
    nan_row = _rows(64, [(0.0, {3: math.nan, 5: 2.0})])
    want = np.array(apply_top_p(nan_row, p))
    assert np.array_equal(np.array(sampling.apply_top_p(nan_row, p)), want, equal_nan=True)


@pytest.mark.parametrize(
    "kw",
    [dict(temp=0.2, top_p=0.9), dict(temp=0.8, top_p=0.5, min_p=0.02), dict(temp=1.0, top_k=40)],
)
def test_the_sampler_draws_mlx_lms_tokens_from_the_same_key(ext, kw):
    from mlx_lm.sample_utils import make_sampler

    x = _logit_rows(11)
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    ours, theirs = sampling.make_sampler(**kw), make_sampler(**kw)
    for seed in range(6):
        mx.random.seed(seed)
        a = ours(lp).tolist()
        mx.random.seed(seed)
        assert a == theirs(lp).tolist(), seed


@pytest.mark.parametrize("temp", [0.2, 1.0, 1.7])
def test_a_rows_draw_is_mlxs_for_the_same_key(ext, temp):
    """MLX draws one row by inverse CDF from one uniform number: the kernel, given that
    number, lands on the same token, on peaked, flat, filtered and tied rows."""
    from mlx_lm.sample_utils import apply_top_p, categorical_sampling

    x = _logit_rows(int(temp * 10))
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    rows = [lp[i : i + 1] for i in range(lp.shape[0])] + [apply_top_p(lp[1:2], 0.9)]
    rows.append(_rows(100, [(-math.inf, {7: 0.0, 50: 0.0})]))  # two tokens, both able to win
    before, draws = ext.sample_calls(2), 0
    for row in rows:
        for seed in range(8):
            mx.random.seed(seed)
            got = sampling.categorical_sampling(row, temp)
            assert got.shape == (1,) and got.dtype == mx.uint32
            got = got.item()
            mx.random.seed(seed)
            assert got == categorical_sampling(row, temp).item(), seed
            draws += 1
    assert ext.sample_calls(2) == before + draws
    several = mx.concatenate(rows[:2])  # MLX draws several rows another way: its own path
    mx.random.seed(1)
    a = sampling.categorical_sampling(several, temp).tolist()
    mx.random.seed(1)
    assert a == categorical_sampling(several, temp).tolist()
    assert ext.sample_calls(2) == before + draws


def test_seeded_sampled_text_is_the_same_with_the_kernels_off(ext, engine, tiny_dir, monkeypatch):
    def run(**kw):
        kw = dict(model=tiny_dir, chat=False, max_tokens=16, temperature=0.8, top_p=0.9, **kw)
        jobs = [engine.submit(Request(p, seed=s, **kw)) for p, s in (("The quick", 3), ("Hi", 4))]
        return [j.result(timeout=120).token_ids for j in jobs]

    before = [ext.sample_calls(i) for i in range(3)]
    on = run(), run(batch=False)
    assert all(ext.sample_calls(i) > before[i] for i in range(3))  # the kernels drew them
    monkeypatch.setenv(sampling.ENV, "0")  # MLX's and mlx-lm's own functions
    after = [ext.sample_calls(i) for i in range(3)]
    off = run(), run(batch=False)
    assert [ext.sample_calls(i) for i in range(3)] == after
    assert on == off and on[0] == on[1]  # and batched rows draw what solo jobs draw


def _sampler_rows():
    """Five rows' samplers: three alike (one group), one with min-p and top-k, one hot."""
    alike = dict(temp=0.2, top_p=0.9)
    kws = [alike, dict(temp=0.8, top_p=0.5, min_p=0.02, top_k=40), alike, dict(temp=1.7), alike]
    return [sampling.make_sampler(**kw) for kw in kws]


@pytest.mark.parametrize("threads", [0, 1])
def test_rows_drawn_together_are_the_rows_own_draws(ext, threads):
    """draw_rows against each row's own sampler, keyed and from the global sequence: the
    same tokens, in row order, from one draw call per group of settings, on one thread
    or several (the governor's knob)."""
    x = _logit_rows(5)
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    samplers = _sampler_rows()
    ext.set_threads(threads)
    try:
        for keyed in (True, False):
            keys = [
                (lambda i=i: mx.random.seed(100 + i)) if keyed else (lambda: None) for i in range(5)
            ]
            mx.random.seed(9)
            before = ext.sample_calls(2)
            got = sampling.draw_rows(lp, samplers, keys)
            assert got.dtype == mx.uint32 and got.shape == (5,)
            got = got.tolist()
            assert ext.sample_calls(2) == before + 5
            mx.random.seed(9)
            want = []
            for i, s in enumerate(samplers):
                keys[i]()
                want.append(s(lp[i : i + 1]).item())
            assert got == want, keyed
    finally:
        ext.set_threads(0)


def test_draw_rows_leaves_what_the_kernels_cannot_take_to_the_rows(ext, monkeypatch):
    """None (and no random number drawn) for a sampler of another origin or with the
    kernels off: the caller goes row by row."""
    x = _logit_rows(6)[:2]
    samplers = _sampler_rows()[:2]
    noop = [lambda: None] * 2
    mx.random.seed(3)
    assert sampling.draw_rows(x, [samplers[0], lambda lp: lp], noop) is None
    monkeypatch.setenv(sampling.ENV, "0")
    assert sampling.draw_rows(x, samplers, noop) is None
    after = mx.random.uniform(shape=(1,)).item()
    mx.random.seed(3)
    assert mx.random.uniform(shape=(1,)).item() == after  # the sequence untouched


def test_the_nucleus_filter_sorts_only_what_can_change_its_sums(ext):
    """Values 19 or more under a row's maximum add under half an ulp to the running sum
    (checked per row): only the rest is sorted, bit for bit mlx-lm's filter still. Rows
    where that cannot hold (NaN, no finite maximum, sums too small for the check, top-p
    above 1) sort everything, with the same result as mlx-lm's."""
    from mlx_lm.sample_utils import apply_top_p

    x = _logit_rows(21)
    wide = mx.random.normal((2, 49152), key=mx.random.key(4)) * 9  # long tails under the cut
    lp = mx.concatenate([x, wide]) - mx.logsumexp(mx.concatenate([x, wide]), axis=-1, keepdims=True)
    tiny = lp[5:] - 80  # long tails, and sums under the check's range
    for rows, p, head in ((lp, 0.9, 7), (lp, 0.3, 7), (tiny, 0.9, 0), (lp[:2], 1.5, 0)):
        before = ext.sample_calls(3)
        got = sampling.apply_top_p(rows, p)
        mx.eval(got)
        assert ext.sample_calls(3) == before + head, p
        assert np.array_equal(_bits(got), _bits(apply_top_p(rows, p))), p
    assert np.isfinite(np.array(sampling.apply_top_p(wide, 0.9))).sum() > 1
