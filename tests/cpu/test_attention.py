"""The fused causal attention of prefill chunks: equal to MLX's, taken only where exact."""

import mlx.core as mx
import pytest

from mlx_notebook.cpu import attention as ca
from mlx_notebook.cpu import blas as _blas

pytestmark = pytest.mark.skipif(
    _blas.native_library() is None, reason="the fast path's native library is not loaded"
)


def qkv(heads, kv_heads, rows, size, dim, seed=0):
    mx.random.seed(seed)
    return (
        mx.random.normal((1, heads, rows, dim)),
        mx.random.normal((1, kv_heads, size, dim)),
        mx.random.normal((1, kv_heads, size, dim)),
    )


@pytest.mark.parametrize(
    "heads,kv_heads,rows,size,dim",
    [
        (9, 3, 256, 768, 64),
        (4, 4, 37, 37, 32),
        (8, 2, 33, 101, 128),
        (2, 1, 64, 64, 80),
        (9, 3, 2, 300, 64),
        (9, 3, 17, 256, 64),
        (4, 2, 5, 5, 64),
        (14, 2, 9, 77, 64),
    ],  # verify passes (a position's 7 heads of a group: 4 + 3 value sums in registers)
)
def test_equal_to_mlx_causal_attention(heads, kv_heads, rows, size, dim):
    q, k, v = qkv(heads, kv_heads, rows, size, dim)
    scale = dim**-0.5
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask="causal")
    calls = ca.calls()
    out = ca.causal_attention(q, k, v, scale)
    assert ca.calls() == calls + 1 and out.shape == ref.shape
    assert mx.abs(out - ref).max().item() < 1e-5


@pytest.mark.parametrize("rows,size", [(40, 90), (33, 33), (1, 77), (3, 131)])
def test_scores_far_past_exp_range_take_each_rows_own_max(rows, size):
    # Scores of magnitude ~200 after scaling: e^x is clamped near e^88, so a softmax
    # shifted by anything but the row's true max (its last keys included) comes out
    # flat or wrong. A row's max sits anywhere, also in the keys after the vectors.
    q, k, v = qkv(2, 1, rows, size, 64, seed=2)
    q = q * 200
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal")
    out = ca.causal_attention(q, k, v, 0.125) if rows > 1 else ca.batched_step(q, k, v, 0.125, None)
    # Scores this large carry float32 rounding of ~1e-5 each; a wrong shift errs by O(1).
    assert mx.abs(out - ref).max().item() < 1e-3


def test_one_thread_gives_the_same_numbers():
    q, k, v = qkv(4, 2, 40, 90, 64, seed=1)
    lib = _blas.native_library()
    try:
        lib.mlxnb_set_threads(1)
        one = ca.causal_attention(q, k, v, 0.125)
    finally:
        lib.mlxnb_set_threads(0)
    assert mx.array_equal(one, ca.causal_attention(q, k, v, 0.125))  # rows are independent


def test_it_takes_only_what_it_computes_exactly():
    q, k, _ = qkv(4, 2, 40, 90, 64)
    assert ca.applies(q, k, "causal", None, None)
    assert not ca.applies(q, k, mx.zeros((40, 90)), None, None)  # a mask array (windows)
    assert not ca.applies(q, k, None, None, None)
    assert not ca.applies(q, k, "causal", mx.zeros((4,)), None)  # attention sinks
    assert not ca.applies(q[:, :, :1], k, "causal", None, None)  # a decode step
    assert ca.applies(q[:, :, :2], k, "causal", None, None)  # a verify pass of one draft
    assert not ca.applies(mx.concatenate([q, q]), mx.concatenate([k, k]), "causal", None, None)
    assert not ca.applies(q.astype(mx.float16), k.astype(mx.float16), "causal", None, None)

    class Quantized:
        bits = 4

    assert not ca.applies(q, k, "causal", None, Quantized())


def test_a_loaded_model_prefills_through_it_and_decodes_as_before(tiny_dir):
    # The engine's loader installs it on CPU; a long prompt's chunks go through the
    # kernel, and logits stay those of mlx-lm's own attention.
    import sys

    from mlx_notebook.models.loader import load_spec

    _, model, _, _ = load_spec(tiny_dir)
    assert "fused prefill attention" in model._mlxnb_fast
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    fused = module.scaled_dot_product_attention
    original = fused.mlxnb_original
    ca.install(model)
    assert module.scaled_dot_product_attention is fused  # once per module

    from mlx_notebook.cpu import ext as _ext

    ids = mx.array([[(7 * i) % 300 + 3 for i in range(300)]])
    calls, primitive = ca.calls(), _ext.attention().causal_calls()
    got = model(ids)
    mx.eval(got)
    assert ca.calls() == calls + len(model.model.layers)
    # past FEW_QUERIES queries a chunk takes OpenBLAS through numpy, not the primitive
    assert _ext.attention().causal_calls() == primitive and ids.shape[1] > ca.FEW_QUERIES
    module.scaled_dot_product_attention = original
    try:
        want = model(ids)
    finally:
        module.scaled_dot_product_attention = fused
    # Float summation order differs (as between any two kernels): relative 1e-5.
    assert mx.allclose(got, want, rtol=1e-4, atol=1e-4).item()
    top2 = mx.sort(want[0], axis=-1)[:, -2:]
    ties = (top2[:, 1] - top2[:, 0]) < 1e-3
    differ = got[0].argmax(-1) != want[0].argmax(-1)
    assert not mx.any(differ & ~ties).item()  # greedy ids equal, or a near-tie


@pytest.mark.parametrize("fused_layers", [True, False])
def test_decode_steps_and_verify_passes_take_their_kernels(tiny_dir, monkeypatch, fused_layers):
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_notebook.cpu import ext as _ext
    from mlx_notebook.cpu import layer as cpu_layer
    from mlx_notebook.models.loader import load_spec

    if not fused_layers:  # the attention of layers that keep their own call
        monkeypatch.setenv(cpu_layer.ENV, "0")
    _, model, _, _ = load_spec(tiny_dir)
    ext = _ext.attention()
    assert ext is not None, _ext.status()  # built here: gcc, g++ and nanobind are installed
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[(5 * i) % 300 + 3 for i in range(40)]]), cache=cache))
    layers = len(model.model.layers)
    calls, steps, attends = ca.calls(), ext.attention_calls(), ext.attend_calls()
    logits = model(mx.array([[7]]), cache=cache)  # a decode step, built, not yet run
    assert ca.calls() == calls  # in MLX's lazy graph: the step stays pipelined
    mx.eval(logits)
    assert ca.calls() == calls + layers  # the decode kernel, once per layer
    # Fused layers read the cache in place (attend_out); others through the attention's
    # own primitive (decode_attention).
    assert ext.attend_calls() - attends == (layers if fused_layers else 0)
    assert ext.attention_calls() - steps == (0 if fused_layers else layers)
    chunks = ext.causal_calls()
    logits = model(mx.array([[7, 8, 9, 10, 11]]), cache=cache)  # a verify pass of 4 drafts
    assert ext.causal_calls() == chunks  # lazy too: no evaluation per layer
    mx.eval(logits)
    assert ca.calls() == calls + 2 * layers and ext.causal_calls() == chunks + layers


def test_a_one_row_decode_step_equals_mlx_attention(tiny_dir):
    import sys

    from mlx_lm.models.cache import make_prompt_cache

    from mlx_notebook.models.loader import load_spec

    _, model, _, _ = load_spec(tiny_dir)
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    fused = module.scaled_dot_product_attention
    prompt = mx.array([[(11 * i) % 300 + 3 for i in range(57)]])
    got, want = [], []
    for out, f in ((got, fused), (want, fused.mlxnb_original)):
        module.scaled_dot_product_attention = f
        try:
            cache = make_prompt_cache(model)
            mx.eval(model(prompt, cache=cache))
            for t in (5, 9, 200):
                out.append(model(mx.array([[t]]), cache=cache))
        finally:
            module.scaled_dot_product_attention = fused
    for a, b in zip(got, want):
        assert mx.allclose(a, b, rtol=1e-4, atol=1e-4).item()


def test_without_the_extension_one_row_steps_keep_mlx_and_batches_go_through_numpy(
    tiny_dir, monkeypatch
):
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    from mlx_notebook.cpu import ext as _ext
    from mlx_notebook.models.loader import load_spec

    _, model, _, _ = load_spec(tiny_dir)
    monkeypatch.setitem(_ext._state, "attention", False)
    caches = []
    for n in (9, 4):
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([[(3 * i + n) % 300 + 3 for i in range(n)]]), cache=cache))
        caches.append(cache)
    calls = ca.calls()
    mx.eval(model(mx.array([[5]]), cache=caches[0]))  # one row: MLX's kernel
    assert ca.calls() == calls
    merged = [KVCache.merge([c[i] for c in caches]) for i in range(len(caches[0]))]
    mx.eval(model(mx.array([[5], [6]]), cache=merged))  # batched: the kernel, via numpy
    assert ca.calls() == calls + len(model.model.layers)


def test_switched_off_by_its_variable(tiny_dir, monkeypatch):
    from mlx_notebook.models.loader import load_spec

    monkeypatch.setenv(ca.ENV, "0")
    _, model, _, _ = load_spec(tiny_dir)
    assert "fused prefill attention" not in model._mlxnb_fast
    assert ca.install(model) == 0


@pytest.mark.parametrize("masked", [True, False])
def test_a_batched_step_equals_mlx_and_reads_the_cache_in_place(masked):
    # One query per row against a KV cache's buffer sliced to its length (a strided
    # view, as mlx-lm's batched cache hands it over); left padding masks early keys.
    rows, size = 5, 70
    mx.random.seed(3)
    q = mx.random.normal((rows, 9, 1, 64))
    kbuf, vbuf = mx.random.normal((2, rows, 3, 256, 64))
    k, v = kbuf[..., :size, :], vbuf[..., :size, :]
    pad = mx.array([0, 3, 69, 10, 1])  # row 2 sees one key
    mask = (pad[:, None, None, None] <= mx.arange(size)) if masked else None
    mx.eval(q, k, v, mask)
    assert ca.applies_to_step(q, k, mask, None, None)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    calls = ca.calls()
    got = ca.batched_step(q, k, v, 0.125, mask)
    assert ca.calls() == calls + 1
    assert got.shape == ref.shape and mx.allclose(got, ref, atol=1e-5).item()


def test_a_batched_step_takes_only_what_it_computes_exactly():
    q, k = mx.zeros((4, 8, 1, 32)), mx.zeros((4, 2, 20, 32))
    assert ca.applies_to_step(q, k, None, None, None)
    assert ca.applies_to_step(q[:1], k[:1], None, None, None)  # one row: a decode step
    assert not ca.applies_to_step(mx.zeros((4, 8, 2, 32)), k, None, None, None)  # two queries
    assert not ca.applies_to_step(q, k, mx.zeros((4, 1, 1, 20)), None, None)  # additive mask
    assert not ca.applies_to_step(q, k, "causal", None, None)
    assert not ca.applies_to_step(q, k, None, mx.zeros((8,)), None)  # attention sinks
    assert not ca.applies_to_step(q.astype(mx.float16), k.astype(mx.float16), None, None, None)


def test_a_batched_decode_step_of_a_model_goes_through_it(tiny_dir):
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    from mlx_notebook.models.loader import load_spec

    _, model, _, _ = load_spec(tiny_dir)
    rows = []
    for n in (12, 30, 7):  # different lengths: the merged cache left-pads
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([[(3 * i + n) % 300 + 3 for i in range(n)]]), cache=cache))
        rows.append(cache)
    merged = [KVCache.merge([r[i] for r in rows]) for i in range(len(rows[0]))]
    ids = mx.array([[5], [6], [7]])
    calls = ca.calls()
    got = model(ids, cache=merged)
    mx.eval(got)
    assert ca.calls() == calls + len(model.model.layers)
    for i, cache in enumerate(rows):  # each row alone (no padding mask)
        want = model(ids[i : i + 1], cache=cache)
        assert mx.allclose(got[i : i + 1], want, rtol=1e-4, atol=1e-4).item()
