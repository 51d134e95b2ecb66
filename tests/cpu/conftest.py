"""Fixtures of the fast path's kernel tests."""

import pytest


@pytest.fixture(scope="module")
def float_inputs():
    """The extension with float32 inputs on every path (its integer dots off) for a
    module that compares the kernels' sums with MLX's to float rounding; the dots' own
    bound is tests/cpu/test_dots.py's. Afterwards, as ``MLX_NOTEBOOK_INT_DOTS`` says."""
    from mlx_notebook.cpu import ext as _ext

    mod = _ext.load()
    assert mod is not None, _ext.status()  # gcc, g++ and nanobind are installed here
    mod.set_int_dots(0)
    yield mod
    _ext.int_dots(mod)
