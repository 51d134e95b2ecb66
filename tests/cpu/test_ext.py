"""The quantized-product extension: built here, equal to MLX's own kernel on every path,
and refused (with the reason) when it cannot be built or speaks another ABI."""

import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import ext as _ext

ROWS = (1, 3, 5, 8, 9, 16, 17, 31, 33, 70)


@pytest.fixture(scope="module")
def ext(float_inputs):
    return float_inputs


def _case(rows, n, k, gs, bits, seed=0):
    import mlx.core as mx

    w = mx.random.normal((n, k), key=mx.random.key(seed))
    x = mx.random.normal((rows, k), key=mx.random.key(seed + 1))
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    ref = mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=gs, bits=bits)
    return x, wq, s, b, ref


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("rows", ROWS)
def test_equals_mlx_quantized_matmul_on_every_path(ext, rows, gs, bits):
    import mlx.core as mx

    x, wq, s, b, ref = _case(rows, 74, 256, gs, bits, seed=rows)  # 74: blocks of 4, then 2 rows
    path = ext.path(rows, bits)  # AMX's tiles (where granted) take 4 and 8 bits
    before = ext.calls(path)
    got = ext.quant_matmul(x, wq, s, b, gs, bits)
    assert got.shape == ref.shape and got.dtype == mx.float32
    assert mx.abs(got - ref).max().item() < 1e-3 * max(1.0, mx.abs(ref).max().item())
    assert ext.calls(path) == before + 1  # the path this row count takes


@pytest.mark.parametrize("k", [256, 1536])  # 1,536: the row tiles' stretches of K
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("gs", [32, 64])
@pytest.mark.parametrize("rows", (*ROWS, 64, 100))
def test_float16_scales_give_the_float32_products_exactly(ext, rows, gs, bits, k):
    """Scales and biases kept in float16 (a GGUF file's own) are widened, never rounded:
    every path gives the products of the same values held in float32, bit for bit."""
    import mlx.core as mx

    x, wq, s, b, _ = _case(rows, 74, k, gs, bits, seed=rows)
    s16 = mx.concatenate([s[:, :1] * 1e-4, s[:, 1:]], axis=1).astype(mx.float16)  # subnormals
    b16 = b.astype(mx.float16)
    assert (mx.abs(s16[:, 0]) < 6.1e-5).all().item()  # below float16's smallest normal
    want = ext.quant_matmul(x, wq, s16.astype(mx.float32), b16.astype(mx.float32), gs, bits)
    mx.eval(want)  # lazy: counted when evaluated
    path = ext.path(rows, bits)
    before = ext.calls(path)
    got = ext.quant_matmul(x, wq, s16, b16, gs, bits)
    assert got.dtype == mx.float32 and mx.array_equal(got, want).item()
    assert ext.calls(path) == before + 1


@pytest.mark.parametrize("k, gs", [(256, 32), (1536, 64)])
@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("bits", [4, 5, 6, 8])
@pytest.mark.parametrize("rows", (1, 3, 9, 17, 70))
def test_no_biases_means_symmetric_blocks(ext, rows, bits, half, k, gs):
    """Biases left out are made as GGUF's Q4_0 and Q8_0 blocks have them, the scale times
    -2^(bits - 1): every path gives the products with those biases given, bit for bit."""
    import mlx.core as mx

    x, wq, s, _, _ = _case(rows, 74, k, gs, bits, seed=rows)
    s = s.astype(mx.float16 if half else mx.float32)
    want = ext.quant_matmul(x, wq, s, s * -(2 ** (bits - 1)), gs, bits)
    got = ext.quant_matmul(x, wq, s, None, gs, bits)
    assert mx.array_equal(got, want).item()


def test_row_counts_take_the_three_paths_in_order(ext):
    ext.set_amx(0)  # AMX tiles, where the CPU has them, take 12-63 rows (test_qmm_amx)
    try:
        paths = [ext.path(rows) for rows in range(1, 300)]
    finally:
        ext.set_amx(1)
    assert paths == sorted(paths) and set(paths) == {0, 1, 2}
    assert paths[0] == 0 and paths[8] == 1  # decode steps; verify passes of 8 drafts
    assert paths[30] == 1  # batches of 16-31 rows: the row tiles (or AVX2's 8-row passes)


@pytest.mark.parametrize("rows", [16, 20])
def test_long_rows_are_summed_in_stretches(ext, rows):
    """16 rows of 1,536 floats do not fit L1: the row tiles add K in stretches."""
    import mlx.core as mx

    x, wq, s, b, ref = _case(rows, 40, 1536, 64, 4, seed=3)
    got = ext.quant_matmul(x, wq, s, b, 64, 4)
    assert mx.abs(got - ref).max().item() < 1e-3 * max(1.0, mx.abs(ref).max().item())


def test_a_stretch_of_input_rows_fits_the_l1_data_cache(ext):
    """Queried, not assumed: 16 rows of 576 floats (36 KB) spill a 32 KB L1 (Zen 4)."""
    import subprocess

    if ext.stretch(16, 576, 32) == 0:
        pytest.skip("no AVX-512 row tiles on this CPU")
    # glibc's answer, which the kernel's sysconf(_SC_LEVEL1_DCACHE_SIZE) also gets
    got = subprocess.run(["getconf", "LEVEL1_DCACHE_SIZE"], capture_output=True, text=True)
    l1 = int(got.stdout.strip() or 0)
    budget = (l1 if 16384 <= l1 <= 1 << 20 else 32768) * 5 // 6  # bytes of x kept in L1
    for rows, k in [(16, 576), (16, 1536), (12, 576), (8, 576), (16, 64)]:
        step = ext.stretch(rows, k, 32)
        assert step % 32 == 0 and 32 <= step <= k
        assert rows * step * 4 <= budget  # the block's stretch of x stays in L1
        parts = -(-k // step)
        if parts > 1:  # and no fewer stretches would have
            assert rows * (-(-k // 32 // (parts - 1)) * 32) * 4 > budget
    assert ext.stretch(16, 576, 32) == (576 if budget >= 16 * 576 * 4 else 288)


def test_views_and_leading_axes(ext):
    import mlx.core as mx

    x, wq, s, b, _ = _case(6, 40, 128, 32, 4)
    x3 = mx.random.normal((2, 128, 3)).transpose(0, 2, 1)  # a (2, 3, 128) strided view
    ref = mx.quantized_matmul(x3, wq, s, b, transpose=True, group_size=32, bits=4)
    got = ext.quant_matmul(x3, wq, s, b, 32, 4)
    assert got.shape == (2, 3, 40)
    assert mx.allclose(got, ref, atol=1e-4, rtol=1e-4).item()


@pytest.mark.parametrize("rows", [3, 20])  # 20: the AMX tiles where the CPU has them
def test_one_thread_gives_the_same_products(ext, rows):
    import mlx.core as mx

    x, wq, s, b, _ = _case(rows, 4096, 512, 64, 4)  # big enough to be threaded
    many = ext.quant_matmul(x, wq, s, b, 64, 4)
    ext.set_threads(1)
    try:
        one = ext.quant_matmul(x, wq, s, b, 64, 4)
        mx.eval(one)
    finally:
        ext.set_threads(0)
    assert mx.array_equal(many, one).item()  # rows are split, sums are not


def test_one_row_products_share_the_helper_thread(ext):
    # A decode step's products from 2^18 multiply-adds (below the LM head's OpenMP
    # threads) are split with helper.c's thread, in four long runs of weight rows (each
    # thread reads on through memory; 64-row units read slower); the same sums,
    # whoever computes them.
    import mlx.core as mx

    from mlx_notebook.cpu import blas as _blas

    if not _blas.AVX512 <= _blas._cpu_flags():
        pytest.skip("the four-row blocks that the helper shares are AVX-512's")
    import ctypes

    lib = _blas.native_library()
    governed = ctypes.c_int.in_dll(lib, "mlxnb_thread_count")  # an earlier engine's governor
    kept, governed.value = governed.value, 0  # may have left one thread
    try:
        x, wq, s, b, ref = _case(1, 1024, 576, 32, 4)  # 590K multiply-adds
        before, units = lib.mlxnb_helper_calls(), lib.mlxnb_helper_posted()
        shared = ext.quant_matmul(x, wq, s, b, 32, 4)
        mx.eval(shared)
    finally:
        governed.value = kept
    assert lib.mlxnb_helper_calls() == before + 1
    assert lib.mlxnb_helper_posted() == units + 4  # 256 blocks of four rows: 4 runs of 64
    xs, ws, ss, bs, _ = _case(1, 64, 256, 32, 4)
    small = ext.quant_matmul(xs, ws, ss, bs, 32, 4)
    mx.eval(small)  # 16K multiply-adds: waking the helper would cost more
    assert lib.mlxnb_helper_calls() == before + 1
    ext.set_threads(1)  # the thread governor's one thread: no helper either
    try:
        one = ext.quant_matmul(x, wq, s, b, 32, 4)
        mx.eval(one)
    finally:
        ext.set_threads(0)
    assert lib.mlxnb_helper_calls() == before + 1
    assert mx.array_equal(shared, one).item()
    # Past the size that takes OpenMP's threads (an LM head): the helper where OpenMP
    # would run two threads, OpenMP's team where it would run more.
    ext.set_small_parallel_min(1 << 18)
    governed.value = 0
    try:
        for threads, helped in ((2, 1), (4, 0)):
            ext.set_threads(threads)
            before = lib.mlxnb_helper_calls()
            again = ext.quant_matmul(x, wq, s, b, 32, 4)
            mx.eval(again)
            assert lib.mlxnb_helper_calls() == before + helped, threads
            assert mx.array_equal(again, one).item()
    finally:
        ext.set_threads(0)
        ext.set_small_parallel_min(1 << 23)
        governed.value = kept
    assert mx.abs(shared - ref).max().item() < 1e-3 * mx.abs(ref).max().item()
    governed.value = 0
    try:
        ext.set_one_row_blocks(16)  # the units of before (benchmarks/bench_units.py)
        units = lib.mlxnb_helper_posted()
        small_units = ext.quant_matmul(x, wq, s, b, 32, 4)
        mx.eval(small_units)
        assert lib.mlxnb_helper_posted() == units + 16
    finally:
        ext.set_one_row_blocks(0)
        governed.value = kept
    assert mx.array_equal(small_units, shared).item()


@pytest.mark.parametrize(("n", "blocks"), [(2, 0), (6, 0), (6, 1), (6, 1000), (22, 3)])
def test_one_row_products_in_runs_of_any_size(ext, n, blocks):
    # Runs of weight rows for the helper when the blocks of four are fewer than the runs
    # (none: N < 4, a product long in K), one block a run, and the benchmark's setting
    # above and below the product's blocks: every row computed once, the same sums.
    import ctypes

    import mlx.core as mx

    from mlx_notebook.cpu import blas as _blas

    if not _blas.AVX512 <= _blas._cpu_flags():
        pytest.skip("the four-row blocks that the helper shares are AVX-512's")
    lib = _blas.native_library()
    governed = ctypes.c_int.in_dll(lib, "mlxnb_thread_count")
    kept, governed.value = governed.value, 0
    x, wq, s, b, ref = _case(1, n, 131072, 32, 4)  # from 2^18 multiply-adds: the helper's
    try:
        ext.set_one_row_blocks(blocks)
        units = lib.mlxnb_helper_posted()
        got = ext.quant_matmul(x, wq, s, b, 32, 4)
        mx.eval(got)
        posted = lib.mlxnb_helper_posted() - units
    finally:
        ext.set_one_row_blocks(0)
        governed.value = kept
    fours = n // 4  # in runs of `per` blocks: 4 runs, or the setting's count
    per = -(-fours // min(4 if not blocks else -(-fours // blocks), fours)) if fours else 1
    assert posted == -(-fours // per)
    assert mx.abs(got - ref).max().item() < 1e-3 * mx.abs(ref).max().item()


@pytest.mark.parametrize("rows", [2, 5, 16, 17])
def test_products_of_several_rows_share_the_helper_on_two_cores(ext, rows):
    # Verify passes and batched steps: the AVX-512 row tiles' groups of weight rows go to
    # the calling thread and helper.c's where OpenMP would run two threads, to OpenMP's team
    # where it would run more, to the caller alone under the governor's one thread; the
    # same sums whoever computes them.
    import ctypes

    import mlx.core as mx

    from mlx_notebook.cpu import blas as _blas

    if not _blas.AVX512 <= _blas._cpu_flags():
        pytest.skip("the row tiles are AVX-512's")
    lib = _blas.native_library()
    governed = ctypes.c_int.in_dll(lib, "mlxnb_thread_count")
    kept, governed.value = governed.value, 0
    x, wq, s, b, ref = _case(rows, 1024, 576, 32, 4)
    # AMX's tiles keep OpenMP's threads, but leave a last block of 1-3 rows past a multiple
    # of 16 (a verify pass of 17) to the vector kernels: 2-3 rows to the row tiles (the
    # helper on two cores), one row to the one-row kernel, whose products of this size take
    # the helper at any thread count but the governor's one (a decode step's).
    path = ext.path(rows)
    tail = rows % 16 if path == 3 and rows > 16 and rows % 16 <= 3 else 0
    got = []
    try:
        for threads, helped in ((2, int(path == 1 or tail > 0)), (4, int(tail == 1)), (1, 0)):
            ext.set_threads(threads)
            before = lib.mlxnb_helper_calls()
            out = ext.quant_matmul(x, wq, s, b, 32, 4)
            mx.eval(out)
            assert lib.mlxnb_helper_calls() == before + helped, threads
            got.append(out)
    finally:
        ext.set_threads(0)
        governed.value = kept
    assert all(mx.array_equal(g, got[0]).item() for g in got[1:])
    assert mx.abs(got[0] - ref).max().item() < 1e-3 * mx.abs(ref).max().item()


@pytest.mark.parametrize(
    "change",
    [
        {"bits": 3},
        {"gs": 16},
        {"x_dtype": "float16"},
        {"k": 96},  # not a multiple of the group size
        {"scales": "float16"},  # biases still float32
        {"scales": "bfloat16", "biases": "bfloat16"},
        {"k": 0},
    ],
)
def test_unsupported_inputs_are_refused(ext, change):
    import mlx.core as mx

    x, wq, s, b, _ = _case(2, 16, 128, 32, 4)
    if "x_dtype" in change:
        x = x.astype(mx.float16)
    if "k" in change:
        x = x[:, : change["k"]]
    s = s.astype(getattr(mx, change.get("scales", "float32")))
    b = b.astype(getattr(mx, change.get("biases", "float32")))
    with pytest.raises(ValueError):
        ext.quant_matmul(x, wq, s, b, change.get("gs", 32), change.get("bits", 4))


def test_no_compiler_means_no_extension_and_a_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("MLX_NOTEBOOK_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "/bin/false")
    path, why = _ext.build()
    assert path is None and why.startswith("compiling argmax.c failed")
    assert not list(tmp_path.rglob("*.so"))  # nothing half-written is left


def test_missing_nanobind_is_named(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nanobind", None)  # import fails
    assert "nanobind" in _ext._versions()


def test_another_nanobind_abi_is_detected():
    class OtherAbi:  # what a module from a disjoint nanobind domain does with mx.array
        @staticmethod
        def quant_matmul(*args):
            raise TypeError("incompatible function arguments")

    assert "nanobind" in _ext._check(OtherAbi)


@pytest.fixture(scope="module")
def attention(ext):
    mod = _ext.attention()
    assert mod is not None  # the fast path's library is loaded here (OpenBLAS, gcc)
    return mod


@pytest.mark.parametrize("mask_rows", [None, 1, 5])
@pytest.mark.parametrize("keys", ["cache view", "transposed"])
def test_decode_attention_equals_mlx(attention, mask_rows, keys):
    import mlx.core as mx

    rows, size = 5, 70
    mx.random.seed(4)
    q = mx.random.normal((rows, 9, 1, 64))
    kbuf, vbuf = mx.random.normal((2, rows, 3, 256, 64))
    k, v = kbuf[..., :size, :], vbuf[..., :size, :]  # a KV cache's buffer, sliced: read in place
    if keys == "transposed":  # last axis not dense: gathered first
        k = mx.random.normal((rows, 3, 64, size)).transpose(0, 1, 3, 2)
    mask = None
    if mask_rows:
        pad = mx.array([0, 3, 69, 10, 1])[:mask_rows]  # a row that sees one key
        mask = pad[:, None, None, None] <= mx.arange(size)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    before = attention.attention_calls()
    got = attention.decode_attention(q, k, v, mask, 0.125)
    assert attention.attention_calls() == before  # lazy: a node of MLX's graph
    assert got.shape == ref.shape and mx.allclose(got, ref, atol=1e-5).item()
    assert attention.attention_calls() == before + 1


@pytest.mark.parametrize("heads,kv_heads", [(14, 2), (8, 1), (5, 5), (12, 3)])
def test_decode_attention_with_any_number_of_heads_per_group(attention, heads, kv_heads):
    # With AVX-512 a group's heads share each key and value row read, their value sums in
    # registers four heads at a time: 7 heads = 4 + 3, 8 = 4 + 4; keys 16 at a time (45 = 2
    # blocks and a tail of 13).
    import mlx.core as mx

    rows, size = 3, 45
    mx.random.seed(8)
    q = mx.random.normal((rows, heads, 1, 64))
    kbuf, vbuf = mx.random.normal((2, rows, kv_heads, 64, 64))
    k, v = kbuf[..., :size, :], vbuf[..., :size, :]
    mask = mx.array([0, 7, 44])[:, None, None, None] <= mx.arange(size)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    got = attention.decode_attention(q, k, v, mask, 0.125)
    assert got.shape == ref.shape and mx.allclose(got, ref, atol=1e-5).item()


def test_a_mask_that_shows_every_key_gives_the_unmasked_numbers(attention):
    # A batched row without padding and the same row alone (no mask): the same softmax,
    # bit for bit, so batching cannot move a greedy token.
    import mlx.core as mx

    rows, size = 2, 70
    mx.random.seed(9)
    q = mx.random.normal((rows, 9, 1, 64)) * 3
    k, v = mx.random.normal((2, rows, 3, size, 64))
    every = mx.ones((rows, 1, 1, size), mx.bool_)
    plain = attention.decode_attention(q, k, v, None, 0.125)
    masked = attention.decode_attention(q, k, v, every, 0.125)
    assert mx.array_equal(plain, masked).item()


@pytest.mark.parametrize("threads", [2, 1])
def test_decode_attention_splits_a_long_cache_over_threads(attention, threads):
    # One or two rows of 3 key/value heads are too few for 2 threads: each head's keys are
    # split in parts, each part's softmax left unnormalized and merged after. Row 0 sees
    # only the last 300 keys (its first part sees none), row 1 all of them; large scores
    # make the parts' maxima far apart.
    import mlx.core as mx

    from mlx_notebook.cpu import blas as _blas

    lib = _blas.native_library()
    rows, size = 2, 2100
    mx.random.seed(6)
    q = mx.random.normal((rows, 9, 1, 64)) * 4
    kbuf, vbuf = mx.random.normal((2, rows, 3, 2304, 64))
    k, v = kbuf[..., :size, :], vbuf[..., :size, :]
    mask = mx.array([1800, 0])[:, None, None, None] <= mx.arange(size)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    try:
        lib.mlxnb_set_threads(threads)
        before = lib.mlxnb_attention_splits()
        got = attention.decode_attention(q, k, v, mask, 0.125)
        mx.eval(got)
        assert lib.mlxnb_attention_splits() == before + (threads > 1)
        blind = attention.decode_attention(
            q[:1], k[:1], v[:1], mx.zeros((1, 1, 1, size), mx.bool_), 1.0
        )
        mx.eval(blind)
        assert lib.mlxnb_attention_splits() == before + 2 * (threads > 1)
    finally:
        lib.mlxnb_set_threads(0)
    assert mx.allclose(got, ref, atol=1e-5).item()
    assert not mx.any(blind).item()  # a row that sees no key: zeros, in every part


@pytest.mark.parametrize("rows,size", [(5, 70), (70, 70), (1, 9)])
@pytest.mark.parametrize("keys", ["cache view", "transposed"])
def test_causal_attention_equals_mlx(attention, rows, size, keys):
    import mlx.core as mx

    mx.random.seed(5)
    q = mx.random.normal((1, 9, rows, 64))
    kbuf, vbuf = mx.random.normal((2, 1, 3, 256, 64))
    k, v = kbuf[..., :size, :], vbuf[..., :size, :]  # a KV cache's buffer, sliced: read in place
    if keys == "transposed":  # last axis not dense: gathered first
        k = mx.random.normal((1, 3, 64, size)).transpose(0, 1, 3, 2)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal")
    before = attention.causal_calls()
    got = attention.causal_attention(q, k, v, 0.125)
    assert attention.causal_calls() == before  # lazy: a node of MLX's graph
    assert got.shape == ref.shape and mx.allclose(got, ref, atol=1e-5).item()
    assert attention.causal_calls() == before + 1


def test_causal_attention_refuses_what_it_does_not_compute(attention):
    import mlx.core as mx

    q, k = mx.zeros((1, 9, 8, 64)), mx.zeros((1, 3, 6, 64))
    for args in ((q, k, k), (q[:, :, :4], k, k[..., :32]), (mx.zeros((2, 9, 4, 64)), k, k)):
        with pytest.raises(ValueError):  # more queries than keys, shapes, a batch
            attention.causal_attention(*args, 0.125)


def test_decode_attention_refuses_what_it_does_not_compute(attention):
    import mlx.core as mx

    q, k = mx.zeros((2, 8, 1, 32)), mx.zeros((2, 2, 20, 32))
    for bad in (
        (mx.zeros((2, 8, 2, 32)), k, k, None),  # two queries
        (q, mx.zeros((2, 3, 20, 32)), mx.zeros((2, 3, 20, 32)), None),  # 8 heads, 3 groups
        (q, k, k, mx.zeros((2, 1, 1, 20))),  # an additive (float) mask
        (q, k, k, mx.zeros((2, 1, 1, 19), dtype=mx.bool_)),  # the wrong length
        (q.astype(mx.float16), k.astype(mx.float16), k.astype(mx.float16), None),
    ):
        with pytest.raises(ValueError):
            attention.decode_attention(*bad, 0.1)


def test_every_native_source_ships_in_the_package_and_lives_in_csrc():
    # Compiled from the installed package: a source left out of the package data leaves
    # a pip-installed copy (not an editable one) on MLX's path.
    from pathlib import Path

    import tomllib

    from mlx_notebook.cpu import build

    root = Path(__file__).parents[2]
    conf = tomllib.loads((root / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["mlx_notebook"]
    pkg = root / "mlx_notebook"
    shipped = {p for g in globs for p in pkg.glob(g) if p.is_file()}
    assert set(build.manifest()) <= shipped
    native = {p for g in ("*.c", "*.cpp", "*.h", "*.inc") for p in pkg.rglob(g)}
    assert native == set(build.manifest())  # no native file outside cpu/csrc
    assert {p.name for p in build.sources("lib")} == {"attn.c", "gemv.c", "helper.c"}
    assert {p.name for p in build.sources("kernels")} >= {"qmm.c", "layer.c"}


def test_any_file_under_csrc_is_part_of_the_build_key(tmp_path, monkeypatch):
    import shutil

    from mlx_notebook.cpu import build

    copy = tmp_path / "csrc"
    shutil.copytree(build.CSRC, copy)
    monkeypatch.setattr(build, "CSRC", copy)
    before = build.key()
    fragment = copy / "kernels" / "qmm_sgemm.inc"  # a fragment no build lists by name
    fragment.write_text(fragment.read_text() + "\n")
    assert build.key() != before
