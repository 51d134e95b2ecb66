"""The quantized-product extension: built here, equal to MLX's own kernel on every path,
and refused (with the reason) when it cannot be built or speaks another ABI."""

import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook import _qext

PATHS = {1: 0, 3: 0, 4: 0, 5: 1, 17: 1, 31: 1, 32: 2, 70: 2}  # rows -> kernel path


@pytest.fixture(scope="module")
def ext():
    mod = _qext.load()
    assert mod is not None, _qext.status()  # gcc, g++ and nanobind are installed here
    return mod


def _case(rows, n, k, gs, bits, seed=0):
    import mlx.core as mx

    w = mx.random.normal((n, k), key=mx.random.key(seed))
    x = mx.random.normal((rows, k), key=mx.random.key(seed + 1))
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    ref = mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=gs, bits=bits)
    return x, wq, s, b, ref


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("rows", sorted(PATHS))
def test_equals_mlx_quantized_matmul_on_every_path(ext, rows, gs, bits):
    import mlx.core as mx

    x, wq, s, b, ref = _case(rows, 72, 256, gs, bits, seed=rows)
    before = ext.calls(PATHS[rows])
    got = ext.quant_matmul(x, wq, s, b, gs, bits)
    assert got.shape == ref.shape and got.dtype == mx.float32
    assert mx.abs(got - ref).max().item() < 1e-3 * max(1.0, mx.abs(ref).max().item())
    assert ext.calls(PATHS[rows]) == before + 1  # the path this row count takes


def test_views_and_leading_axes(ext):
    import mlx.core as mx

    x, wq, s, b, _ = _case(6, 40, 128, 32, 4)
    x3 = mx.random.normal((2, 128, 3)).transpose(0, 2, 1)  # a (2, 3, 128) strided view
    ref = mx.quantized_matmul(x3, wq, s, b, transpose=True, group_size=32, bits=4)
    got = ext.quant_matmul(x3, wq, s, b, 32, 4)
    assert got.shape == (2, 3, 40)
    assert mx.allclose(got, ref, atol=1e-4, rtol=1e-4).item()


def test_one_thread_gives_the_same_products(ext):
    import mlx.core as mx

    x, wq, s, b, _ = _case(3, 4096, 512, 64, 4)  # big enough to be threaded
    many = ext.quant_matmul(x, wq, s, b, 64, 4)
    ext.set_threads(1)
    try:
        one = ext.quant_matmul(x, wq, s, b, 64, 4)
        mx.eval(one)
    finally:
        ext.set_threads(0)
    assert mx.array_equal(many, one).item()  # rows are split, sums are not


@pytest.mark.parametrize(
    "change",
    [
        {"bits": 3},
        {"gs": 16},
        {"x_dtype": "float16"},
        {"k": 96},  # not a multiple of the group size
    ],
)
def test_unsupported_inputs_are_refused(ext, change):
    import mlx.core as mx

    x, wq, s, b, _ = _case(2, 16, 128, 32, 4)
    if "x_dtype" in change:
        x = x.astype(mx.float16)
    if "k" in change:
        x = x[:, : change["k"]]
    with pytest.raises(ValueError):
        ext.quant_matmul(x, wq, s, b, change.get("gs", 32), change.get("bits", 4))


def test_no_compiler_means_no_extension_and_a_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("MLX_NOTEBOOK_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "/bin/false")
    path, why = _qext.build()
    assert path is None and why.startswith("compiling _qmm.c failed")
    assert not list(tmp_path.rglob("*.so"))  # nothing half-written is left


def test_missing_nanobind_is_named(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nanobind", None)  # import fails
    assert "nanobind" in _qext._versions()


def test_another_nanobind_abi_is_detected():
    class OtherAbi:  # what a module from a disjoint nanobind domain does with mx.array
        @staticmethod
        def quant_matmul(*args):
            raise TypeError("incompatible function arguments")

    assert "nanobind" in _qext._check(OtherAbi)
