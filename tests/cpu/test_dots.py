"""Quantized products on inputs rounded to 16 bits a unit of 32 (kernels/qmm_dots.inc):
a decode step's on integer dots, every product within that rounding of the exact one,
and every path (verify passes, batched steps, prefill) the same function; a prefill
pass's products on inputs rounded to 8 bits (qmm_igemm.inc), row by row."""

import os
from contextlib import contextmanager

import numpy as np
import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import ext as _ext


def dots_on() -> bool:
    """Whether the loaded extension rounds quantized products' inputs (its status says)."""
    return "integer dots for decode steps and prefill" in _ext.status()


@contextmanager
def prefill_at_8_bits():
    """``MLX_NOTEBOOK_PREFILL_INT8=1`` within (a prefill's products on 8-bit inputs), as
    the variable says again after."""
    mod, before = _ext.load(), os.environ.get(_ext.PREFILL8_ENV)
    os.environ[_ext.PREFILL8_ENV] = "1"
    try:
        if mod is not None:
            _ext.int_dots(mod)
        yield
    finally:
        if before is None:
            del os.environ[_ext.PREFILL8_ENV]
        else:
            os.environ[_ext.PREFILL8_ENV] = before
        if mod is not None:
            _ext.int_dots(mod)


def logprob_tolerance() -> float:
    """How far a quantized model's log-probabilities may be from stock mlx-lm's: 1e-4
    for float sums in another order; 2e-3 with inputs rounded to 16 bits (up to 8.2e-4
    measured on the default model over 64 tokens)."""
    return 2e-3 if dots_on() else 1e-4


@pytest.fixture(scope="module")
def ext():
    mod = _ext.load()
    assert mod is not None, _ext.status()
    if not mod.set_int_dots(1):
        pytest.skip("this CPU has no AVX-512 VNNI")
    yield mod
    _ext.int_dots(mod)  # as the variable says


def _product(ext, x, wq, s, b, gs, bits):
    import mlx.core as mx

    before = ext.calls(4)
    got = ext.quant_matmul(x, wq, s, b, gs, bits)
    mx.eval(got)
    return np.array(got, dtype=np.float64), ext.calls(4) - before


def _bound(x, w, K):
    """Each output's largest error from rounding x: sum |w| d / 2, d = a unit's max / 32639."""
    units = np.abs(x.reshape(-1, K // 32, 32)).max(axis=2) / 32639
    half = np.repeat(units, 32, axis=1) / 2
    return np.abs(w) @ half[0]


def _layout(wq, s, b, bits, layout):
    """The arrays the kernel takes, and the biases that dequantize them exactly."""
    import mlx.core as mx

    if layout == "symmetric":  # GGUF's Q4_0 and Q8_0: no biases stored
        s = s.astype(mx.float16)
        return (wq, s, None), s.astype(mx.float32) * -(2 ** (bits - 1))
    if layout == "float16":  # a converted GGUF's block scales, mlx-community's
        s, b = s.astype(mx.float16), b.astype(mx.float16)
    return (wq, s, b), b


@pytest.mark.parametrize("layout", ["float32", "float16", "symmetric"])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("K", [64, 576, 2048])
def test_one_row_products_stay_within_the_rounding_of_their_inputs(ext, bits, gs, K, layout):
    import mlx.core as mx

    if K % gs:
        pytest.skip("groups do not divide K")
    w = mx.random.normal((37, K), key=mx.random.key(K + gs))  # 37: a last row on its own
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    (wq, s, b), exact_b = _layout(wq, s, b, bits, layout)
    # heavy tails and one outlier, as a residual stream has
    x = mx.random.normal((1, K), key=mx.random.key(1)) * mx.exp(mx.random.normal((1, K)))
    x = x.at[0, 5].add(300.0)
    deq = mx.dequantize(
        wq, s.astype(mx.float32), exact_b.astype(mx.float32), group_size=gs, bits=bits
    )
    exact = np.array(deq, dtype=np.float64)
    xn = np.array(x, dtype=np.float64)
    got, dots = _product(ext, x, wq, s, b, gs, bits)
    assert dots == 1
    err = np.abs(got[0] - exact @ xn[0])
    slack = 1e-5 * np.abs(exact @ xn[0]).max()  # float32 sums
    assert (err <= _bound(xn, exact, K) + slack).all()
    ext.set_int_dots(0)
    try:
        floats = _product(ext, x, wq, s, b, gs, bits)[0]
    finally:
        ext.set_int_dots(1)
    assert np.abs(got - floats).max() > slack  # rounded inputs, not float ones


@pytest.mark.parametrize("quant", [(32, 4), (64, 4), (32, 5), (64, 6), (32, 8), (64, 8)])
@pytest.mark.parametrize("M", [2, 5, 15, 16, 17, 70])  # row tiles or AMX's; integer sums
def test_every_row_of_several_gets_what_its_one_row_product_gives(ext, M, quant):
    """Verify passes, batched steps and prefill round their inputs as decode steps do:
    each row's sums equal its one-row product's up to float order."""
    import mlx.core as mx

    gs, bits = quant
    K = 576  # a half quad at the end
    w = mx.random.normal((40, K), key=mx.random.key(0))
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    x = mx.random.normal((M, K), key=mx.random.key(1)) * 4
    gemms = ext.calls(5)
    got, dots = _product(ext, x, wq, s, b, gs, bits)
    # the integer sums from 16 rows (AMX tiles, where granted, keep 12-63); a last 1-3
    # rows past 16 take their own path after (17: one row, on the one-row dots)
    assert ext.calls(5) - gemms == (M >= 16 and ext.path(M, bits) == 2)
    assert dots == (M == 17)  # AMX's tiles, where granted, leave it the same last row
    rows = np.concatenate([_product(ext, x[i : i + 1], wq, s, b, gs, bits)[0] for i in range(M)])
    exact = np.array(mx.dequantize(wq, s, b, group_size=gs, bits=bits), dtype=np.float64)
    scale = np.abs(rows).max()
    assert np.abs(got - rows).max() < 1e-5 * scale  # float order
    assert np.abs(got - np.array(x, dtype=np.float64) @ exact.T).max() > 1e-5 * scale


def test_odd_units_keep_float_inputs(ext):
    import mlx.core as mx

    for M in (1, 3):
        w = mx.random.normal((8, 96), key=mx.random.key(0))  # three units: no pairs
        wq, s, b = mx.quantize(w, group_size=32, bits=4)
        x = mx.random.normal((M, 96), key=mx.random.key(1))
        got, dots = _product(ext, x, wq, s, b, 32, 4)
        want = mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=32, bits=4)
        assert dots == 0 and np.allclose(got, np.array(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M", [1, 3])
@pytest.mark.parametrize("at", [3, 20])  # either half of a unit
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_inputs_that_are_not_finite_take_the_float_path(ext, M, at, bad):
    import mlx.core as mx

    w = mx.random.normal((8, 128), key=mx.random.key(0))
    wq, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((M, 128), key=mx.random.key(1))
    x = x.at[M - 1, at].add(bad)
    got, dots = _product(ext, x, wq, s, b, 32, 4)
    want = np.array(mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=32, bits=4))
    assert dots == 0
    assert not np.isfinite(got[M - 1]).any()  # NaN or inf, as MLX's
    assert np.array_equal(np.isfinite(got), np.isfinite(want))


def test_inputs_too_small_to_scale_round_to_zero(ext):
    import mlx.core as mx

    w = mx.random.normal((8, 64), key=mx.random.key(0))
    wq, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.concatenate([mx.full((1, 32), 1e-38), mx.random.normal((1, 32))], axis=1)
    got, dots = _product(ext, x, wq, s, b, 32, 4)
    x0 = x.at[0, :32].multiply(0.0)  # the tiny unit counts as zeros
    want = np.array(mx.quantized_matmul(x0, wq, s, b, transpose=True, group_size=32, bits=4))
    assert dots == 1 and np.isfinite(got).all()
    assert np.allclose(got, want, rtol=1e-3, atol=1e-3)


def test_the_variable_turns_them_off_and_the_status_says_so(ext, monkeypatch):
    import mlx.core as mx

    w = mx.random.normal((8, 128), key=mx.random.key(0))
    wq, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((1, 128), key=mx.random.key(1))
    monkeypatch.setenv(_ext.DOTS_ENV, "0")
    assert _ext.int_dots(ext) == "; integer dots off (MLX_NOTEBOOK_INT_DOTS=0)"
    assert _product(ext, x, wq, s, b, 32, 4)[1] == 0
    monkeypatch.delenv(_ext.DOTS_ENV)
    monkeypatch.delenv(_ext.PREFILL8_ENV, raising=False)
    assert _ext.int_dots(ext) == "; integer dots for decode steps and prefill"
    assert _product(ext, x, wq, s, b, 32, 4)[1] == 1 and not _ext.prefill_inputs8()
    monkeypatch.setenv(_ext.PREFILL8_ENV, "1")
    eight = "; integer dots for decode steps and prefill (prefill's inputs at 8 bits)"
    assert _ext.int_dots(ext) == eight and _ext.prefill_inputs8()
    monkeypatch.delenv(_ext.PREFILL8_ENV)
    _ext.int_dots(ext)


def _rounded(x, K, top_int=32639):
    """x as the kernels round it: each unit of 32 to r = round(x / d), d = max / top_int
    (32639: 16 bits; 127: a prefill pass's 8), in float32 as they compute it; returned as
    r d in float64."""
    xs = np.array(x, dtype=np.float32).reshape(x.shape[0], K // 32, 32)
    top = np.abs(xs).max(axis=2, keepdims=True)
    inv = np.where(top > 0, np.float32(top_int) / np.where(top > 0, top, 1), np.float32(0))
    r = np.rint(xs * inv.astype(np.float32)).astype(np.float64)
    return (r * (top / np.float32(top_int)).astype(np.float64)).reshape(x.shape[0], K)


def _igemm(ext, x, wq, s, b, gs, bits, inputs8=False, counter=5):
    import mlx.core as mx

    before = ext.calls(counter)
    got = ext.quant_matmul(x, wq, s, b, gs, bits, inputs8)
    mx.eval(got)
    return np.array(got, dtype=np.float64), ext.calls(counter) - before


@pytest.mark.parametrize("layout", ["float32", "float16", "symmetric"])
@pytest.mark.parametrize("quant", [(32, 4), (64, 4), (128, 4), (32, 5), (128, 6), (32, 8), (64, 8)])
@pytest.mark.parametrize("M", [16, 20, 64, 67, 70, 80, 129])  # whole and partial blocks
def test_prefill_products_take_integer_sums_of_the_rounded_inputs(ext, M, quant, layout):
    """From 16 rows the products take vpdpwssd's exact int32 sums (qmm_igemm.inc):
    each output is W . round(x) up to float order, as every other path computes."""
    import mlx.core as mx

    gs, bits = quant
    K = 640  # units in K blocks of 8, and a block of 4
    w = mx.random.normal((53, K), key=mx.random.key(gs + bits))  # 53: tasks of 24, tiles of 6
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    (wq, s, b), exact_b = _layout(wq, s, b, bits, layout)
    x = mx.random.normal((M, K), key=mx.random.key(1)) * mx.exp(mx.random.normal((M, K)))
    deq = mx.dequantize(
        wq, s.astype(mx.float32), exact_b.astype(mx.float32), group_size=gs, bits=bits
    )
    exact = np.array(deq, dtype=np.float64)
    ext.set_amx(0)  # AMX tiles, where granted, take 12-63 rows
    try:
        got, gemms = _igemm(ext, x, wq, s, b, gs, bits)
    finally:
        _ext.amx_tiles(ext)  # as the variable says
    assert gemms == 1 and got.shape == (M, 53)
    want = _rounded(x, K) @ exact.T
    scale = np.abs(want).max()
    assert np.abs(got - want).max() < 2e-6 * scale  # float order only
    unrounded = np.array(x, dtype=np.float64) @ exact.T
    assert np.abs(got - unrounded).max() > 2e-6 * scale  # rounded inputs, not float ones


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("M, at", [(70, 69), (70, 3), (17, 16), (17, 2), (65, 64)])
def test_inputs_that_are_not_finite_leave_every_row_on_float_inputs(ext, M, at, bad):
    """Anywhere, a last row past 16 included: every row gets what it gets with the dots
    off (float inputs), bit for bit, as one-row and other products do."""
    import mlx.core as mx

    w = mx.random.normal((8, 128), key=mx.random.key(0))
    wq, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((M, 128), key=mx.random.key(1)).at[at, 7].add(bad)
    got, gemms = _igemm(ext, x, wq, s, b, 32, 4)
    ext.set_int_dots(0)
    try:
        floats = _igemm(ext, x, wq, s, b, 32, 4)[0]
    finally:
        ext.set_int_dots(1)
    assert gemms == 0
    assert not np.isfinite(got[at]).any() and np.isfinite(np.delete(got, at, axis=0)).all()
    assert np.array_equal(got, floats, equal_nan=True)


def test_prefill_products_keep_float_inputs_with_the_dots_off(ext):
    import mlx.core as mx

    w = mx.random.normal((8, 128), key=mx.random.key(0))
    wq, s, b = mx.quantize(w, group_size=32, bits=4)
    x = mx.random.normal((64, 128), key=mx.random.key(1))
    ext.set_int_dots(0)
    try:
        got, gemms = _igemm(ext, x, wq, s, b, 32, 4)
    finally:
        ext.set_int_dots(1)
    want = np.array(mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=32, bits=4))
    assert gemms == 0 and np.allclose(got, want, rtol=1e-5, atol=1e-5)


def _quantized(layout, gs, bits, N=53, K=640):
    import mlx.core as mx

    w = mx.random.normal((N, K), key=mx.random.key(gs + bits))
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    (wq, s, b), exact_b = _layout(wq, s, b, bits, layout)
    deq = mx.dequantize(
        wq, s.astype(mx.float32), exact_b.astype(mx.float32), group_size=gs, bits=bits
    )
    return (wq, s, b), np.array(deq, dtype=np.float64)


@pytest.mark.parametrize("layout", ["float32", "float16", "symmetric"])
@pytest.mark.parametrize("quant", [(32, 4), (64, 4), (128, 4), (32, 5), (128, 6), (32, 8), (64, 8)])
@pytest.mark.parametrize("M", [1, 5, 16, 17, 33, 70, 129])  # no tail: every row, any count
def test_a_prefill_pass_products_take_8_bit_inputs(ext, M, quant, layout):
    """A prefill pass's products (inputs8) round every row's units to 8 bits and take
    vpdpbusd's exact int32 sums: W . round8(x) up to float order, however few the rows."""
    import mlx.core as mx

    gs, bits = quant
    (wq, s, b), exact = _quantized(layout, gs, bits)
    x = mx.random.normal((M, 640), key=mx.random.key(1)) * mx.exp(mx.random.normal((M, 640)))
    ext.set_amx(0)
    try:
        got, eights = _igemm(ext, x, wq, s, b, gs, bits, inputs8=True, counter=6)
    finally:
        _ext.amx_tiles(ext)
    assert eights == 1 and got.shape == (M, 53)
    want = _rounded(x, 640, 127) @ exact.T
    scale = np.abs(want).max()
    assert np.abs(got - want).max() < 2e-6 * scale  # float order only
    sixteen = _rounded(x, 640) @ exact.T
    assert np.abs(got - sixteen).max() > 1e-4 * scale  # 8 bits, not 16


def test_a_prefill_row_gets_the_same_sums_however_it_is_chunked(ext):
    """Each row rounds on its own: a row's outputs are bit for bit the same alone, in a
    chunk of 20 or of 70 (a prefill's chunks are sized by time)."""
    import mlx.core as mx

    (wq, s, b), _ = _quantized("symmetric", 32, 4)
    x = mx.random.normal((70, 640), key=mx.random.key(3))
    whole = _igemm(ext, x, wq, s, b, 32, 4, inputs8=True)[0]
    assert np.array_equal(whole[50:70], _igemm(ext, x[50:], wq, s, b, 32, 4, inputs8=True)[0])
    for i in (0, 17, 69):
        assert np.array_equal(whole[i], _igemm(ext, x[i : i + 1], wq, s, b, 32, 4, True)[0][0])


@pytest.mark.parametrize("dots", [True, False])
def test_8_bit_inputs_fall_back_to_the_product_without_them(ext, dots):
    """An input that is not finite, or the dots off: the product is computed as it would
    be outside a prefill pass, bit for bit, and none takes 8-bit inputs."""
    import mlx.core as mx

    (wq, s, b), _ = _quantized("float16", 32, 4)
    x = mx.random.normal((40, 640), key=mx.random.key(4))
    if dots:
        x = x.at[7, 3].add(float("nan"))
    ext.set_int_dots(int(dots))
    try:
        got, eights = _igemm(ext, x, wq, s, b, 32, 4, inputs8=True, counter=6)
        plain = _igemm(ext, x, wq, s, b, 32, 4)[0]
    finally:
        ext.set_int_dots(1)
    assert eights == 0 and np.array_equal(got, plain, equal_nan=True)
