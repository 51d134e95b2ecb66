"""AMX tiles for the quantized products of 12-63 rows (qmm_amx.inc): the same sums as
float32 arithmetic up to the order of additions, on every shape, and a model's greedy
picks equal to MLX's own quantized kernels'."""

import numpy as np
import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import ext as _ext

AMX = 3  # the extension's path number for AMX tiles


@pytest.fixture(scope="module")
def ext(float_inputs):
    mod = float_inputs
    if not mod.set_amx(1):
        pytest.skip("this CPU (or its kernel) has no AMX tiles for this process")
    return mod


def _case(rows, n, k, gs, bits, seed):
    import mlx.core as mx

    w = mx.random.normal((n, k), key=mx.random.key(seed))
    x = mx.random.normal((rows, k), key=mx.random.key(seed + 1))
    # Significands that need all three bf16 parts: 1 + 2^-20 loses its tail in two.
    x = x * (1 + 2.0**-20) + mx.where(mx.arange(k) % 5 == 0, 1e-3, 0.0)
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    return x, wq, s, b


def _exact_bound(x, wq, s, b, gs, bits):
    """float64 products and, per output, the sum of |terms|: float32 summation in any
    order stays within a small multiple of 2^-24 of that sum."""
    import mlx.core as mx

    w = np.array(mx.dequantize(wq, s, b, group_size=gs, bits=bits), dtype=np.float64)
    xs = np.array(x, dtype=np.float64)
    return xs @ w.T, np.abs(xs) @ np.abs(w).T


@pytest.mark.parametrize("bits,gs", [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64)])
@pytest.mark.parametrize("rows", [12, 16, 17, 33, 63])
def test_products_are_float32_sums_of_exact_products(ext, rows, gs, bits):
    """Each input is split into three bf16 parts that add up to it exactly: the error is
    float32 rounding (far under 2^-16, what a dropped third part would cost)."""
    x, wq, s, b = _case(rows, 84, 384, gs, bits, seed=rows)  # 84: 5 blocks of 16, then 4
    before = ext.calls(AMX)
    got = np.array(ext.quant_matmul(x, wq, s, b, gs, bits), dtype=np.float64)
    assert ext.calls(AMX) == before + 1
    ref, mag = _exact_bound(x, wq, s, b, gs, bits)
    assert np.all(np.abs(got - ref) <= 64 * 2.0**-24 * mag)


@pytest.mark.parametrize("bits,gs", [(4, 32), (8, 64)])
@pytest.mark.parametrize("n", [84, 1000])
def test_float16_scales_give_the_float32_products_exactly(ext, n, gs, bits):
    """A chunk's float16 scales and biases are widened for its rows: the products of the
    same values held in float32, bit for bit, over chunks of every size."""
    import mlx.core as mx

    x, wq, s, b = _case(16, n, 384, gs, bits, seed=n)
    s16, b16 = s.astype(mx.float16), b.astype(mx.float16)
    want = ext.quant_matmul(x, wq, s16.astype(mx.float32), b16.astype(mx.float32), gs, bits)
    mx.eval(want)
    before = ext.calls(AMX)
    got = ext.quant_matmul(x, wq, s16, b16, gs, bits)
    assert mx.array_equal(got, want).item() and ext.calls(AMX) == before + 1
    # no biases: each the scale times -2^(bits - 1), made per chunk
    sym = ext.quant_matmul(x, wq, s16, None, gs, bits)
    assert mx.array_equal(
        sym, ext.quant_matmul(x, wq, s16, s16 * -(2 ** (bits - 1)), gs, bits)
    ).item()


@pytest.mark.parametrize("n", [1000, 4100])
def test_chunks_the_threads_claim_cover_every_weight_row(ext, n):
    """Chunks claimed in shrinking sizes (256 down to 64 rows, a short last one) cover
    every weight row: N not a multiple of 16, many chunks per thread."""
    x, wq, s, b = _case(16, n, 256, 32, 4, seed=n)
    got = np.array(ext.quant_matmul(x, wq, s, b, 32, 4), dtype=np.float64)
    ref, mag = _exact_bound(x, wq, s, b, 32, 4)
    assert np.all(np.abs(got - ref) <= 64 * 2.0**-24 * mag)


def test_row_counts_from_12_to_63_take_the_tiles(ext):
    assert [ext.path(m) for m in (1, 2, 8, 11)] == [0, 1, 1, 1]  # the row tiles
    assert {ext.path(m) for m in range(12, 64)} == {AMX}
    assert ext.path(64) == 2  # prefill: sgemm
    ext.set_amx(0)
    try:
        assert {ext.path(m) for m in range(12, 64)} == {1}
    finally:
        ext.set_amx(1)


def test_the_variable_turns_them_off_and_status_says_so(ext, monkeypatch):
    monkeypatch.setenv("MLX_NOTEBOOK_AMX", "0")
    try:
        assert _ext.amx_tiles(ext) == "; AMX tiles off (MLX_NOTEBOOK_AMX=0)"
        assert ext.path(16) == 1
    finally:
        monkeypatch.delenv("MLX_NOTEBOOK_AMX")
        assert _ext.amx_tiles(ext) == "; AMX tiles for products of several rows"
    assert ext.path(16) == AMX


def test_the_row_tiles_they_replace_are_within_the_same_bound(ext):
    """Off (MLX_NOTEBOOK_AMX=0), the AVX-512 row tiles take these rows: same bound."""
    x, wq, s, b = _case(16, 200, 576, 32, 4, seed=7)
    ref, mag = _exact_bound(x, wq, s, b, 32, 4)
    on = np.array(ext.quant_matmul(x, wq, s, b, 32, 4), dtype=np.float64)
    ext.set_amx(0)
    try:
        off = np.array(ext.quant_matmul(x, wq, s, b, 32, 4), dtype=np.float64)
    finally:
        ext.set_amx(1)
    for got in (on, off):
        assert np.all(np.abs(got - ref) <= 64 * 2.0**-24 * mag)


@pytest.fixture(scope="module")
def quantized(tiny_dir, tmp_path_factory):
    from mlx_notebook.testing import quantize_model_dir

    root = tmp_path_factory.mktemp("amx")
    kinds = [(32, 4), (64, 4), (64, 8)]
    return {k: str(quantize_model_dir(tiny_dir, root / f"q{k[0]}-{k[1]}", *k)) for k in kinds}


@pytest.mark.parametrize("kind", [(32, 4), (64, 4), (64, 8)])
def test_a_16_token_chunk_picks_what_mlx_quantized_kernels_pick(ext, quantized, kind):
    """A verify pass or batched step of 16 rows through the tiles, against the same model
    on MLX's own quantized kernels: equal greedy picks, or a difference at a near-tie."""
    import mlx.core as mx
    from mlx_lm import load

    from mlx_notebook.cpu import fast as cpu_fast

    def model(fast):
        m = load(quantized[kind])[0]
        m.set_dtype(mx.float32)
        if fast:
            assert cpu_fast.apply(m, "cpu")
        return m

    ids = mx.array([[(37 * i + 11) % 250 + 3 for i in range(16)]])
    ref = model(False)(ids)[0]
    before = ext.calls(AMX)
    got = model(True)(ids)[0]
    mx.eval(got)
    assert ext.calls(AMX) - before == 9  # 2 layers x (q/k/v, o, gate/up, down) + the head
    ref_np, got_np = np.array(ref), np.array(got)
    assert np.abs(got_np - ref_np).max() <= 1e-4 * max(1.0, np.abs(ref_np).max())
    for r, g in zip(ref_np, got_np):
        if r.argmax() != g.argmax():  # allowed only where the reference's top two tie
            top2 = np.sort(r)[-2:]
            assert top2[1] - top2[0] < 1e-4
