"""Fused decode steps of llama layers: the two primitives against MLX's own operations,
and models whose layers take them against the same models without."""

import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import ext as _ext
from mlx_notebook.cpu import fast as cpu_fast
from mlx_notebook.cpu import layer as cpu_layer


@pytest.fixture(scope="module")
def ext(float_inputs):
    return float_inputs


def _weights(n, k, quant, seed):
    """A linear layer's arrays for the primitive, and the float weight MLX uses."""
    import mlx.core as mx

    w = mx.random.normal((n, k), key=mx.random.key(seed)) * k**-0.5
    if quant is None:
        return [w], w
    gs, bits = quant
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
    return [wq, s, b], mx.dequantize(wq, s, b, group_size=gs, bits=bits)


def _rms(x, w, eps):
    import mlx.core as mx

    return x * mx.rsqrt(mx.mean(mx.square(x), axis=-1, keepdims=True) + eps) * w


QUANTS = [None, (32, 4), (64, 8)]


@pytest.mark.parametrize("quant", [*QUANTS, "apart", "apart-symmetric"])
@pytest.mark.parametrize("traditional", [True, False])
@pytest.mark.parametrize("rows", [1, 3])
def test_layer_in_equals_norm_product_and_rope(ext, quant, traditional, rows):
    import mlx.core as mx

    E, H, Hkv, D, eps, base = 128, 4, 2, 32, 1e-5, 10000.0
    parts, counts = 1, []
    if quant == "apart":  # a K-quant file's layers: q and k 4-bit, v 8-bit, three products
        kinds = [(H, (32, 4)), (Hkv, (32, 4)), (Hkv, (64, 8))]
        made = [_weights(n * D, E, qt, seed=1 + i) for i, (n, qt) in enumerate(kinds)]
        arrays, w, parts = [a for m in made for a in m[0]], mx.concatenate([m[1] for m in made]), 3
    elif quant == "apart-symmetric":  # Q4_K q and k, Q6_K's symmetric 6-bit v: no biases
        made = [_weights(n * D, E, (32, 4), seed=1 + i) for i, n in enumerate((H, Hkv))]
        wq, s, _ = mx.quantize(
            mx.random.normal((Hkv * D, E), key=mx.random.key(3)) * E**-0.5, group_size=32, bits=6
        )
        made.append(([wq, s], mx.dequantize(wq, s, s * -32, group_size=32, bits=6)))
        arrays, w = [a for m in made for a in m[0]], mx.concatenate([m[1] for m in made])
        parts, counts = 3, [3, 3, 2]
    else:
        arrays, w = _weights((H + 2 * Hkv) * D, E, quant, seed=1)
    x = mx.random.normal((rows, 1, E), key=mx.random.key(2))
    nw = mx.random.uniform(0.5, 1.5, (E,), key=mx.random.key(3))
    positions = [7, 130, 0][:rows]
    table = cpu_fast.RopeTable(D, base, 1.0)
    cos, sin = (table.cos2, table.sin2) if traditional else (table.cos, table.sin)
    idx = mx.array(positions)
    before = ext.layer_calls()
    q, k, v = ext.layer_in(
        x, nw, eps, arrays, cos[idx], sin[idx], traditional, H, Hkv, parts, counts=counts
    )
    assert ext.layer_calls() == before  # lazy: computed when evaluated, once for all three
    mx.eval(q, k, v)
    assert ext.layer_calls() == before + 1
    y = _rms(x, nw, eps) @ w.T
    split = lambda a, n: a.reshape(rows, 1, n, D).transpose(0, 2, 1, 3)  # noqa: E731
    rq, rk = split(y[..., : H * D], H), split(y[..., H * D : (H + Hkv) * D], Hkv)
    rv = split(y[..., (H + Hkv) * D :], Hkv)
    rope = lambda a, p: mx.fast.rope(a, D, traditional=traditional, base=base, scale=1.0, offset=p)  # noqa: E731
    rq = mx.concatenate([rope(rq[i : i + 1], p) for i, p in enumerate(positions)])
    rk = mx.concatenate([rope(rk[i : i + 1], p) for i, p in enumerate(positions)])
    for got, want in ((q, rq), (k, rk), (v, rv)):
        assert got.shape == want.shape
        assert mx.allclose(got, want, atol=2e-5, rtol=1e-4).item()


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("rows,gain", [(1, 1.0), (3, 1.0), (37, 40.0)])
def test_layer_out_equals_residuals_norm_and_swiglu_mlp(ext, quant, rows, gain):
    # gain 40: gate values far past where e^-g saturates (the polynomial's clamps).
    import mlx.core as mx
    import mlx.nn as nn

    E, H, D, F, eps = 128, 4, 32, 192, 1e-5
    o, wo = _weights(E, H * D, quant, seed=4)
    gu, wgu = _weights(2 * F, E, quant, seed=5)
    down, wd = _weights(E, F, quant, seed=6)
    # The attention's output as a strided view: the primitive reads it through its strides.
    a = mx.random.normal((rows, 1, H, D), key=mx.random.key(7)).transpose(0, 2, 1, 3)
    x = mx.random.normal((rows, 1, E), key=mx.random.key(8))
    nw = mx.random.uniform(0.5, 1.5, (E,), key=mx.random.key(9)) * gain
    got = ext.layer_out(a, x, o, nw, eps, gu, down)
    h = x + a.transpose(0, 2, 1, 3).reshape(rows, 1, -1) @ wo.T
    g = _rms(h, nw, eps) @ wgu.T
    want = h + (nn.silu(g[..., :F]) * g[..., F:]) @ wd.T
    assert got.shape == want.shape
    assert gain == 1 or mx.abs(g).max().item() > 100
    # With gain, outputs reach thousands: rounding is judged against their scale.
    scale = 1.0 if gain == 1 else mx.abs(want).max().item()
    assert mx.allclose(got, want, atol=2e-5 * scale, rtol=1e-4).item()


# float inputs: 40 rows on the row tiles, 70 widened for sgemm; integer sums and a tail
@pytest.mark.parametrize("dots,rows", [(False, 40), (False, 70), (True, 40)])
def test_layer_out_keeps_its_scratch_between_calls_until_released(ext, dots, rows):
    # A prefill chunk's scratch (tens of MB at 1B) came from malloc at each call: fresh
    # mmaps, every page faulted in again. It is kept now, and handed back on release.
    import mlx.core as mx

    E, H, D, F = 128, 4, 32, 192
    o, _ = _weights(E, H * D, (32, 4), seed=4)
    gu, _ = _weights(2 * F, E, (32, 4), seed=5)
    down, _ = _weights(E, F, (32, 4), seed=6)
    a = mx.random.normal((rows, H, 1, D), key=mx.random.key(7))
    x = mx.random.normal((rows, 1, E), key=mx.random.key(8))
    nw = mx.ones((E,))
    mx.eval(o, gu, down, a, x, nw)
    if dots and not ext.set_int_dots(1):
        pytest.skip("no AVX-512 VNNI: the products keep float inputs")
    try:
        first = ext.layer_out(a, x, o, nw, 1e-5, gu, down)
        mx.eval(first)
        held, grows = ext.scratch_held()
        assert held >= 4 * rows * (E + 2 * F)  # the residual and the MLP's rows at least
        again = ext.layer_out(a, x, o, nw, 1e-5, gu, down)
        mx.eval(again)
        assert ext.scratch_held() == (held, grows)  # the same buffers: none allocated
        assert mx.array_equal(first, again).item()
        assert ext.scratch_release() == held
        assert ext.scratch_held() == (0, grows)
        third = ext.layer_out(a, x, o, nw, 1e-5, gu, down)
        mx.eval(third)
        assert ext.scratch_held()[1] > grows  # allocated afresh after the release
        assert mx.array_equal(first, third).item()
    finally:
        ext.set_int_dots(0)


def _attend_inputs(E, H, D, F, quant, rows=1):
    """attend_out's query and layer arrays: q, x, o, the norm's weight, gate/up, down."""
    import mlx.core as mx

    o, _ = _weights(E, H * D, quant, seed=4)
    gu, _ = _weights(2 * F, E, quant, seed=5)
    down, _ = _weights(E, F, quant, seed=6)
    x = mx.random.normal((rows, 1, E), key=mx.random.key(2))
    q = mx.random.normal((rows, H, 1, D), key=mx.random.key(3))
    nw = mx.random.uniform(0.5, 1.5, (E,), key=mx.random.key(9))
    return q, x, o, nw, gu, down


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("S,dense_rows", [(1, True), (7, True), (7, False)])
def test_attend_out_equals_attention_over_the_cache_then_layer_out(ext, quant, S, dense_rows):
    import mlx.core as mx

    E, H, Hkv, D, F, cap, eps, scale = 128, 4, 2, 32, 192, 16, 1e-5, 32**-0.5
    q, x, o, nw, gu, down = _attend_inputs(E, H, D, F, quant)
    if dense_rows:  # a KV cache's buffer
        keys, values = (mx.random.normal((1, Hkv, cap, D), key=mx.random.key(s)) for s in (10, 11))
    else:  # rows not dense: gathered first
        keys, values = (
            mx.random.normal((1, Hkv, D, cap), key=mx.random.key(s)).transpose(0, 1, 3, 2)
            for s in (10, 11)
        )
    before = ext.attend_calls()
    got = ext.attend_out(q, keys, values, S, scale, x, o, nw, eps, gu, down)
    mx.eval(got)
    assert ext.attend_calls() == before + 1
    a = mx.fast.scaled_dot_product_attention(
        q, keys[:, :, :S], values[:, :, :S], scale=scale
    )  # rows past S are not read
    want = ext.layer_out(a, x, o, nw, eps, gu, down)
    assert mx.allclose(got, want, atol=2e-5, rtol=1e-4).item()
    with pytest.raises(ValueError, match="capacity >= S"):
        ext.attend_out(q, keys, values, cap + 1, scale, x, o, nw, eps, gu, down)


@pytest.mark.parametrize("quant", [None, (32, 4)])
@pytest.mark.parametrize("broadcast", [False, True])
def test_attend_out_takes_batched_rows_through_their_mask(ext, quant, broadcast):
    # A batched cache's step: each row attends to the keys its mask shows (left padding),
    # then goes through layer_out; row for row what the row alone would get.
    import mlx.core as mx

    E, H, Hkv, D, F, cap, S, eps, scale = 128, 4, 2, 32, 192, 16, 9, 1e-5, 32**-0.5
    B = 1 if broadcast else 3
    q, x, o, nw, gu, down = _attend_inputs(E, H, D, F, quant, rows=3)
    keys, values = (mx.random.normal((3, Hkv, cap, D), key=mx.random.key(s)) for s in (10, 11))
    pads = [0, 0, 0] if broadcast else [0, 2, 5]
    mask = mx.array([[t >= p for t in range(S)] for p in pads[:B]])[:, None, None]
    before = ext.attend_calls()
    got = ext.attend_out(q, keys, values, S, scale, x, o, nw, eps, gu, down, mask)
    mx.eval(got)
    assert ext.attend_calls() == before + 1
    for b, p in enumerate(pads):
        a = mx.fast.scaled_dot_product_attention(
            q[b : b + 1], keys[b : b + 1, :, p:S], values[b : b + 1, :, p:S], scale=scale
        )
        want = ext.layer_out(a, x[b : b + 1], o, nw, eps, gu, down)
        assert mx.allclose(got[b : b + 1], want, atol=2e-5, rtol=1e-4).item()
    with pytest.raises(ValueError, match="mask"):
        ext.attend_out(q, keys, values, S, scale, x, o, nw, eps, gu, down, mask[..., :-1])


def test_kv_write_writes_its_rows_in_place_unless_the_buffer_is_held():
    import mlx.core as mx
    import numpy as np

    ext = _ext.load()
    addr = lambda a: np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data  # noqa: E731
    buf = mx.zeros((3, 2, 8, 4))
    mx.eval(buf)
    first = addr(buf)
    rows = mx.arange(24, dtype=mx.float32).reshape(3, 2, 1, 4)
    before = ext.write_calls()
    buf = ext.kv_write(buf, rows, 5)  # the cache held its buffer alone: written in place
    mx.eval(buf)
    assert ext.write_calls() == before + 1 and addr(buf) == first
    assert mx.array_equal(buf[:, :, 5:6], rows).item()
    assert mx.sum(mx.abs(buf)).item() == mx.sum(mx.abs(rows)).item()  # no other row touched
    held = buf  # someone else holds it: the write goes to a copy, the held buffer stays
    new = ext.kv_write(buf, rows + 100, 2)
    mx.eval(new)
    assert addr(new) != addr(held)
    assert mx.array_equal(new[:, :, 2:3], rows + 100).item()
    assert mx.array_equal(new[:, :, 5:6], rows).item()
    assert mx.sum(mx.abs(held[:, :, 2:3])).item() == 0
    with pytest.raises(ValueError, match="capacity > n"):
        ext.kv_write(new, rows, 8)


@pytest.mark.parametrize("quant", [None, (32, 4)])
def test_a_long_cache_is_split_over_both_cores_by_the_helper_thread(ext, quant):
    # An OpenMP thread woken for the attention slowed one-row steps (it spins after its
    # region, on the core OpenBLAS's worker or the next step's graph needs): attend_out's
    # attention takes the helper thread (helper.c), float32 or 4-bit, and a long cache's
    # keys are split in parts over both.
    import mlx.core as mx

    from mlx_notebook.cpu import blas as _blas

    lib = _blas.native_library()
    E, H, Hkv, D, F, S, eps, scale = 128, 8, 2, 64, 64, 2100, 1e-5, 64**-0.5
    q, x, o, nw, gu, down = _attend_inputs(E, H, D, F, quant)
    keys, values = (mx.random.normal((1, Hkv, S, D), key=mx.random.key(s)) for s in (10, 11))
    mx.eval(o, gu, down, x, q, nw, keys, values)
    try:
        lib.mlxnb_set_threads(2)
        splits, helped = lib.mlxnb_attention_splits(), lib.mlxnb_helper_calls()
        got = ext.attend_out(q, keys, values, S, scale, x, o, nw, eps, gu, down)
        mx.eval(got)
        assert lib.mlxnb_attention_splits() == splits + 1
        assert lib.mlxnb_helper_calls() == helped + 1
        lib.mlxnb_set_threads(1)  # the governor's one thread: no helper, no split
        alone = ext.attend_out(q, keys, values, S, scale, x, o, nw, eps, gu, down)
        mx.eval(alone)
        assert lib.mlxnb_attention_splits() == splits + 1
        assert lib.mlxnb_helper_calls() == helped + 1
    finally:
        lib.mlxnb_set_threads(0)
    a = mx.fast.scaled_dot_product_attention(q, keys, values, scale=scale)
    want = ext.layer_out(a, x, o, nw, eps, gu, down)
    for out in (got, alone):
        assert mx.allclose(out, want, atol=2e-5, rtol=1e-4).item()


def test_layers_refuse_what_they_do_not_compute(ext):
    import mlx.core as mx

    x, nw = mx.zeros((1, 1, 64)), mx.ones((64,))
    cs = mx.zeros((16,))
    with pytest.raises(ValueError, match="heads"):  # 100 rows are not (4 + 2 * 2) heads
        ext.layer_in(x, nw, 1e-5, [mx.zeros((100, 64))], cs, cs, True, 4, 2)
    with pytest.raises(ValueError, match="RoPE width"):
        ext.layer_in(x, nw, 1e-5, [mx.zeros((128, 64))], cs[:3], cs[:3], True, 4, 2)
    with pytest.raises(ValueError, match="B, 1, E"):  # a prefill chunk: the layer's own call
        ext.layer_in(mx.zeros((1, 2, 64)), nw, 1e-5, [mx.zeros((128, 64))], cs, cs, True, 4, 2)
    with pytest.raises(ValueError, match="4, 5, 6 or 8-bit"):  # 3-bit weights
        wq, s, b = mx.quantize(mx.zeros((128, 64)), group_size=32, bits=3)
        ext.layer_in(x, nw, 1e-5, [wq, s, b], cs, cs, True, 4, 2)
    q, k = mx.zeros((64, 64)), mx.zeros((32, 64))
    with pytest.raises(ValueError, match="as many arrays"):  # three parts of 4 arrays
        ext.layer_in(x, nw, 1e-5, [q, k, k, q], cs, cs, True, 4, 2, 3)
    with pytest.raises(ValueError, match="counts"):  # counts that do not add up to them
        ext.layer_in(x, nw, 1e-5, [q, k, k, q], cs, cs, True, 4, 2, 3, counts=[1, 1, 1])
    with pytest.raises(ValueError, match="H, Hkv and Hkv"):  # k as wide as q
        ext.layer_in(x, nw, 1e-5, [k, q, k], cs, cs, True, 4, 2, 3)


def _model(path, fast=True):
    import mlx.core as mx
    from mlx_lm import load

    model = load(path)[0]
    model.set_dtype(mx.float32)
    if fast:
        cpu_fast.apply(model, "cpu")
    return model


def _decode(model, prompt, n):
    """Greedy ids and every pass's logits: the prompt's, then one token at a time."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    logits = model(mx.array([prompt]), cache=cache)[:, -1]
    ids, steps = [], [logits]
    for _ in range(n):
        t = mx.argmax(logits, axis=-1)
        ids.append(t.item())
        logits = model(t[:, None], cache=cache)[:, -1]
        steps.append(logits)
    mx.eval(steps)
    return ids, steps


@pytest.mark.parametrize("quant", [None, (32, 4), (64, 8)])
def test_fused_model_decodes_what_its_unfused_twin_does(ext, tiny_dir, tmp_path, quant):
    import mlx.core as mx

    from mlx_notebook.testing import quantize_model_dir

    path = tiny_dir if quant is None else str(quantize_model_dir(tiny_dir, tmp_path / "q", *quant))
    fused, plain = _model(path), _model(path)
    assert cpu_layer.install(fused) == 2 and cpu_layer.install(fused) == 0  # once
    prompt, n = [5, 17, 99, 3, 42, 8], 24
    before, steps_before = ext.layer_calls(), ext.attend_calls()
    ids, steps = _decode(fused, prompt, n)
    assert ext.layer_calls() - before == 2 * 2 * (1 + n)  # two halves, two layers, each pass
    assert ext.attend_calls() - steps_before == 2 * n  # each decode step: one per layer
    want_ids, want = _decode(plain, prompt, n)
    assert ids == want_ids
    for got, ref in zip(steps, want):  # float32 sums in another order
        err = (mx.abs(got - ref).max() / mx.abs(ref).max()).item()
        assert err < 1e-4, err


@pytest.mark.parametrize("v", [(64, 8), (32, 6), "symmetric"])
def test_layers_whose_q_k_and_v_differ_in_precision_are_fused_too(ext, tiny_dir, v):
    # A Q4_K_M file: q and k 4-bit, v 6-bit (Q6_K) in some layers. They cannot stack,
    # and those layers took the unfused path (MLX's graph; in a prefill, float copies
    # of the products); the primitive now takes them as three products. Q6_K's groups
    # are symmetric: the fast path keeps no biases, and v goes with two arrays.
    import mlx.core as mx
    import mlx.nn as nn

    gs, bits = (32, 6) if v == "symmetric" else v

    def mixed(path):
        model = _model(path, fast=False)
        nn.quantize(model, class_predicate=lambda p, m: isinstance(m, nn.Linear)
                    and ({"group_size": gs, "bits": bits} if p.endswith("v_proj")
                         else {"group_size": 32, "bits": 4}))  # fmt: skip
        if v == "symmetric":
            for layer in model.model.layers:
                vp = layer.self_attn.v_proj
                vp.biases = vp.scales * -(2 ** (bits - 1))
        return model

    fused, plain = mixed(tiny_dir), mixed(tiny_dir)
    cpu_fast.apply(fused, "cpu")
    assert cpu_layer.install(fused) == 2
    if v == "symmetric":  # made in the kernels
        assert "biases" not in fused.model.layers[0].self_attn.v_proj
        assert fused.model.layers[0]._mlxnb_plan.counts == [3, 3, 2]
    layer = fused.model.layers[0]
    assert type(layer).__name__.startswith("DecodeFused")
    assert layer._mlxnb_plan.qkv == (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                     layer.self_attn.v_proj)  # fmt: skip
    prompt, n = [5, 17, 99, 3, 42, 8], 16
    before = ext.layer_calls()
    ids, steps = _decode(fused, prompt, n)
    assert ext.layer_calls() - before == 2 * 2 * (1 + n)  # two halves, two layers, each pass
    want_ids, want = _decode(plain, prompt, n)
    assert ids == want_ids
    for got, ref in zip(steps, want):  # rounded inputs and float32 sums in another order
        err = (mx.abs(got - ref).max() / mx.abs(ref).max()).item()
        assert err < 2e-3, err


def test_one_row_steps_write_the_cache_in_place(ext, tiny_dir):
    # The cache's write comes before the step reads the buffer, so MLX donates the buffer
    # to it: no copy of the cache each step. Past its capacity the cache grows through
    # mlx-lm's own update, and the steps go on in the new buffer.
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    fused, plain = _model(tiny_dir), _model(tiny_dir)
    cpu_layer.install(fused)
    addr = lambda a: np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data  # noqa: E731
    outs = {}
    for name, model in (("fused", fused), ("plain", plain)):
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([list(range(3, 253))]), cache=cache))  # 250 of 256 rows
        seen, logits = [], []
        for i in range(12):  # through the 256-row boundary, the same tokens for both
            out = model(mx.array([[7 + i]]), cache=cache)[:, -1]
            mx.eval(out)  # each step done before the next is built: no timing involved
            logits.append(out)
            seen.append((cache[0].keys.shape[2], addr(cache[0].keys)))
        outs[name] = logits
        if name == "fused":
            assert len({a for cap, a in seen if cap == 256}) == 1
            assert len({a for cap, a in seen if cap == 512}) == 1
    for got, ref in zip(outs["fused"], outs["plain"]):  # float32 sums in another order
        assert (mx.abs(got - ref).max() / mx.abs(ref).max()).item() < 1e-4


def test_one_row_steps_hold_the_helper_awake_through_each_layer(ext, tiny_dir):
    # A decode step's two primitives a layer (layer_in, attend_out) each keep helper.c's
    # thread awake across their products and release it when done; the thread
    # governor's one thread takes no hold, nor does a batched step where the extension
    # would run more than two threads (OpenMP's team then).
    import ctypes

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_notebook.cpu import blas as _blas

    lib = _blas.native_library()
    if lib is None:
        pytest.skip("the fast path's native library is not loaded")
    governed = ctypes.c_int.in_dll(lib, "mlxnb_thread_count")
    model = _model(tiny_dir)
    cpu_layer.install(model)
    layers = len(model.model.layers)
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[5, 6, 7]]), cache=cache))
    kept, governed.value = governed.value, 0  # an earlier engine's governor may have left 1
    try:
        for threads, holds in ((0, 2 * layers), (1, 0)):
            governed.value = threads
            before, steps = lib.mlxnb_helper_holds(), ext.attend_calls()
            mx.eval(model(mx.array([[1]]), cache=cache))
            assert ext.attend_calls() == steps + layers  # the fused step ran
            assert lib.mlxnb_helper_holds() == before + holds, threads
            assert lib.mlxnb_helper_held() == 0
        governed.value = 0
        E, H, Hkv, D, F, S = 128, 4, 2, 32, 192, 9
        q, x, o, nw, gu, down = _attend_inputs(E, H, D, F, None, rows=3)
        keys, values = (mx.random.normal((3, Hkv, 16, D), key=mx.random.key(s)) for s in (1, 2))
        for threads, holds in ((2, 1), (4, 0)):
            ext.set_threads(threads)
            before = lib.mlxnb_helper_holds()
            mx.eval(ext.attend_out(q, keys, values, S, D**-0.5, x, o, nw, 1e-5, gu, down))
            assert lib.mlxnb_helper_holds() == before + holds, threads
            assert lib.mlxnb_helper_held() == 0
    finally:
        ext.set_threads(0)
        governed.value = kept


def test_chunks_at_an_offset_are_fused_and_batched_chunks_are_not(ext, tiny_dir):
    # Prefill chunks and verify passes: one row's tokens go through the primitives as
    # rows, at the cache's offset; several rows of several tokens keep the layer's call.
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    fused, plain = _model(tiny_dir), _model(tiny_dir)
    cpu_layer.install(fused)
    chunks = [[5, 17, 99, 3, 42, 8, 1], [60, 61, 62], [7, 70, 200, 9]]
    got = {}
    for name, model in (("fused", fused), ("plain", plain)):
        cache = make_prompt_cache(model)
        before = ext.layer_calls()
        got[name] = [model(mx.array([c]), cache=cache) for c in chunks]
        mx.eval(got[name])
        got[name + " calls"] = ext.layer_calls() - before
    assert got["fused calls"] == 2 * 2 * len(chunks) and got["plain calls"] == 0
    for a, b in zip(got["fused"], got["plain"]):
        assert mx.allclose(a, b, atol=1e-4, rtol=1e-4).item()
    before = ext.layer_calls()
    mx.eval(fused(mx.array([[5, 17], [99, 3]]), cache=make_prompt_cache(fused)))
    assert ext.layer_calls() == before


def test_batched_steps_read_the_pinned_rope_rows(ext, tiny_dir):
    # Left-padded rows of a batched cache: the merge leaves no room, so the first step
    # grows the buffer through mlx-lm's own update (and its attention), the next ones
    # write in place and attend through the step's mask in one primitive per layer.
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import KVCache

    fused, plain = _model(tiny_dir), _model(tiny_dir)
    cpu_layer.install(fused)
    prompts = [[5, 17, 99], [8, 1, 2, 3, 4, 60, 61]]
    addr = lambda a: np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data  # noqa: E731
    outs = {}
    for name, model in (("fused", fused), ("plain", plain)):
        caches = []
        for p in prompts:
            c = [KVCache() for _ in model.layers]
            mx.eval(model(mx.array([p]), cache=c))  # the prompts' layers, counted apart
            caches.append(c)
        batch = [KVCache.merge([cs[i] for cs in caches]) for i in range(len(model.layers))]
        tables = cpu_fast.rope_tables(model)
        outs[name], calls, steps, buffers = [], [], [], set()
        for i in range(3):
            for t in tables:
                t.pin([len(p) + i for p in prompts])
            before, steps_before = ext.layer_calls(), ext.attend_calls()
            writes_before = ext.write_calls()
            out = model(mx.array([[7 + i], [9 + i]]), cache=batch)
            mx.eval(out)
            outs[name].append(out)
            calls.append(ext.layer_calls() - before)
            steps.append((ext.attend_calls() - steps_before, ext.write_calls() - writes_before))
            if i:
                buffers.add(addr(batch[0].keys))
            for t in tables:
                t.pin(None)
        outs[name + " calls"], outs[name + " steps"] = calls, steps
        assert [c._idx for c in batch] == [len(prompts[1]) + 3] * len(model.layers)
        if name == "fused":
            assert len(buffers) == 1  # written in place after the first step grew it
    assert outs["fused calls"] == [2 * 2] * 3 and outs["plain calls"] == [0] * 3
    # each fused step: per layer, the keys' and the values' write, then attend_out
    assert outs["fused steps"] == [(0, 0), (2, 4), (2, 4)]
    assert outs["plain steps"] == [(0, 0)] * 3
    for got, ref in zip(outs["fused"], outs["plain"]):
        assert mx.allclose(got, ref, atol=1e-4, rtol=1e-4).item()


def test_a_plain_cache_holding_several_rows_keeps_the_layers_call(ext, tiny_dir):
    # mlx-lm's plain KV cache can hold a batch too (rows prefilled together): a step over
    # it, its RoPE rows pinned, goes through the layers' own path, not the batched one.
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    fused, plain = _model(tiny_dir), _model(tiny_dir)
    cpu_layer.install(fused)
    outs = {}
    for name, model in (("fused", fused), ("plain", plain)):
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([[5, 6, 7], [8, 9, 10]]), cache=cache))
        tables = cpu_fast.rope_tables(model)
        for t in tables:
            t.pin([3, 3])
        steps_before = ext.attend_calls()
        outs[name] = model(mx.array([[1], [2]]), cache=cache)
        mx.eval(outs[name])
        for t in tables:
            t.pin(None)
        assert ext.attend_calls() == steps_before
    assert mx.allclose(outs["fused"], outs["plain"], atol=1e-4, rtol=1e-4).item()


def test_other_families_and_the_switch_keep_their_own_layers(tmp_path, tiny_dir, monkeypatch):
    from mlx_notebook.testing.families import build_family

    for family in ("gemma3_text", "qwen3", "qwen2"):
        model = _model(str(build_family(family, tmp_path / family)))
        assert cpu_layer.install(model) == 0
    monkeypatch.setenv(cpu_layer.ENV, "0")
    assert cpu_layer.install(_model(tiny_dir)) == 0
    monkeypatch.delenv(cpu_layer.ENV)
    assert cpu_layer.install(_model(tiny_dir, fast=False)) == 0  # not on the fast path's modules


def test_the_engine_names_the_fused_layers(engine, tiny_dir):
    from mlx_notebook.engine import Request

    engine.submit(Request("Hello", model=tiny_dir, chat=False, max_tokens=4)).result(timeout=300)
    assert "2 layers fused" in engine.info().models[-1].fast_path
