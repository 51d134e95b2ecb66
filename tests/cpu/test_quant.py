"""Quantized models on the CPU fast path: their layers swapped for native products,
greedy text equal to mlx-lm's own quantized kernels (or different at a near-tie)."""

import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import fast as cpu_fast
from mlx_notebook.cpu import quant as cpu_quant
from mlx_notebook.testing import quantize_model_dir
from tests.cpu.test_dots import dots_on, prefill_at_8_bits
from tests.cpu.test_fast import check_against_mlx_lm


@pytest.fixture(scope="module")
def quantized(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("quantized")
    out = {
        (gs, bits): str(quantize_model_dir(tiny_dir, root / f"q{gs}-{bits}", gs, bits))
        for gs, bits in [(32, 4), (64, 4), (32, 5), (64, 6), (64, 8), (32, 3)]
    }
    # As mlx-community's 4-bit directories: group 64, bfloat16 scales and biases.
    out["community"] = str(quantize_model_dir(tiny_dir, root / "bf16", 64, 4, "bfloat16"))
    # As a converted GGUF file: float16 block scales; and symmetric, as its Q4_0 and Q8_0.
    out["half"] = str(quantize_model_dir(tiny_dir, root / "f16", 32, 4, "float16"))
    for bits in (4, 8):
        sym = quantize_model_dir(tiny_dir, root / f"sym{bits}", 32, bits, "float16", True)
        out[f"sym{bits}"] = str(sym)
    out["half3"] = str(quantize_model_dir(tiny_dir, root / "f16-3", 32, 3, "float16"))
    return out


def _load(path):
    import mlx.core as mx
    from mlx_lm import load

    model = load(path)[0]
    model.set_dtype(mx.float32)
    return model


def test_supported_layers_are_swapped_and_stacked_on_cpu_only(quantized):
    import mlx.nn as nn

    assert cpu_fast.apply(_load(quantized[32, 4]), "gpu") == []
    model = _load(quantized[32, 4])
    done = cpu_fast.apply(model, "cpu")
    # 2 layers x (q, k, v, o, gate, up, down) + the tied embedding
    assert done[0] == "15 quantized products native"
    assert "2 q/k/v stacked" in done and "2 gate/up stacked" in done
    kinds = {type(m) for _, m in model.named_modules()}
    assert nn.QuantizedLinear not in kinds and nn.QuantizedEmbedding not in kinds
    assert cpu_quant.FastQuantizedEmbedding in kinds


def test_other_bit_widths_keep_mlx_kernels(quantized):
    import mlx.nn as nn

    model = _load(quantized[32, 3])
    done = cpu_fast.apply(model, "cpu")
    assert not any("quantized" in d for d in done)
    assert nn.QuantizedLinear in {type(m) for _, m in model.named_modules()}


def test_switched_off_leaves_quantized_layers_alone(quantized, monkeypatch):
    import mlx.nn as nn

    monkeypatch.setenv("MLX_NOTEBOOK_FAST", "0")
    model = _load(quantized[32, 4])
    assert cpu_fast.apply(model, "cpu") == []
    assert nn.QuantizedLinear in {type(m) for _, m in model.named_modules()}


def test_an_unavailable_extension_is_said_in_the_fast_path(quantized, monkeypatch):
    from mlx_notebook.cpu import ext as _ext

    monkeypatch.setattr(_ext, "_state", {"module": None, "reason": "no C/C++ compiler"})
    done = cpu_fast.apply(_load(quantized[32, 4]), "cpu")
    assert done[0] == "quantized products on MLX's kernels: no C/C++ compiler"


@pytest.mark.parametrize(
    "kind", [(32, 4), (64, 4), (32, 5), (64, 6), (64, 8), "community", "half", "sym4", "sym8"]
)
def test_greedy_text_matches_mlx_lm_quantized(engine, quantized, kind):
    path = quantized[kind]
    if kind == "community":
        import json
        from pathlib import Path

        import mlx.core as mx

        stored = mx.load(str(next(Path(path).glob("*.safetensors"))))
        assert stored["model.layers.0.self_attn.q_proj.scales"].dtype == mx.bfloat16
        assert json.loads(Path(path, "config.json").read_text())["quantization"]["group_size"] == 64
    from mlx_notebook.cpu import ext as _ext

    dots = _ext.load().calls(4)
    prompts = ["Hello world. The quick brown fox", "Rivers flow to the sea;", "def main():"]
    check_against_mlx_lm(engine, path, prompts, 40)
    (info,) = [m for m in engine.info().models if m.name == path]
    assert any("quantized products native" in f for f in info.fast_path)
    if dots_on():  # the decode steps took them
        assert _ext.load().calls(4) - dots >= 3 * 39


def _scale_dtypes(model) -> set[str]:
    from mlx.utils import tree_flatten

    names = ("scales", "biases")
    return {str(v.dtype) for k, v in tree_flatten(model.parameters()) if k.endswith(names)}


@pytest.mark.parametrize(
    "kind, want",
    [((32, 4), "float32"), ("community", "float16"), ("half", "float16"), ("sym4", "float16")],
)
def test_scales_stay_float16_where_that_holds_them_exactly(engine, quantized, kind, want):
    """A converted GGUF's float16 block scales and mlx-community's bfloat16 ones run at 16
    bits on the native kernels (a fifth of a 4-bit model's bytes); scales that float16
    would round stay float32, and the other weights are float32."""
    from mlx.utils import tree_flatten

    from mlx_notebook.engine import Request

    path = quantized[kind]
    engine.submit(Request("Hi", model=path, chat=False, max_tokens=2)).result(timeout=60)
    model = engine.registry.peek(path).model
    assert _scale_dtypes(model) == {"mlx.core." + want}
    floats = {str(v.dtype) for k, v in tree_flatten(model.parameters()) if "float" in str(v.dtype)}
    assert floats == {"mlx.core.float32", "mlx.core." + want}
    if want == "float16":  # the embedding's rows dequantized in float32, as MLX's would be
        import mlx.core as mx

        emb = model.model.embed_tokens
        ids = mx.array([[1, 5, 9]])
        s = emb.scales[ids].astype(mx.float32)
        b = s * -(2 ** (emb.bits - 1)) if kind == "sym4" else emb.biases[ids].astype(mx.float32)
        assert ("biases" in emb) is (kind != "sym4")
        ref = mx.dequantize(emb.weight[ids], s, b, group_size=emb.group_size, bits=emb.bits)
        got = emb(ids)
        assert got.dtype == mx.float32 and mx.array_equal(got, ref).item()


@pytest.mark.parametrize("kind, dropped", [("sym4", True), ("sym8", True), ("half", False)])
def test_symmetric_blocks_keep_no_biases(engine, quantized, kind, dropped):
    """Where every bias is its scale times -2^(bits - 1) (GGUF's Q4_0 and Q8_0 blocks),
    the native layers keep none: the kernels make them. A model's bytes shrink by the
    biases, and the fused layers and stacks take the same arrays."""
    from mlx.utils import tree_flatten

    from mlx_notebook.engine import Request

    path = quantized[kind]
    engine.submit(Request("Hi", model=path, chat=False, max_tokens=2)).result(timeout=60)
    lm = engine.registry.peek(path)
    names = [k for k, _ in tree_flatten(lm.model.parameters())]
    assert any(k.endswith(".scales") for k in names)
    assert any(k.endswith(".biases") for k in names) is not dropped
    assert any("layers fused" in f for f in lm.fast_path)


@pytest.mark.parametrize("why", ["fast path off", "no extension", "3 bits"])
def test_layers_left_on_mlx_kernels_get_float32_scales(quantized, monkeypatch, why):
    """MLX's own products would follow float16 scales into float16 arithmetic (slow on
    x86): layers left on its kernels get float32 scales, whatever kept them there."""
    from mlx_notebook.cpu import ext as _ext
    from mlx_notebook.models.loader import load_spec

    if why == "fast path off":
        monkeypatch.setenv("MLX_NOTEBOOK_FAST", "0")
    elif why == "no extension":
        monkeypatch.setattr(_ext, "_state", {"module": None, "reason": "no C/C++ compiler"})
    model = load_spec(quantized["half3" if why == "3 bits" else "half"])[1]
    assert _scale_dtypes(model) == {"mlx.core.float32"}


def test_layers_of_mixed_scale_dtypes_still_stack(quantized):
    """float16 is decided per layer: a q projection whose scales float16 would round
    stays float32 beside float16 k and v, and the three still stack (as float32)."""
    import mlx.core as mx

    model = _load(quantized["half"])
    for layer in model.model.layers:
        q = layer.self_attn.q_proj
        q.scales = q.scales * (1 + 2.0**-20)  # not a float16 value any more
    done = cpu_fast.apply(model, "cpu")
    assert "2 q/k/v stacked" in done
    stack = model.model.layers[0].self_attn.k_proj._stack
    assert stack.scales.dtype == stack.biases.dtype == mx.float32


@pytest.mark.parametrize("kind", [(32, 4), (32, 5), (64, 6), (64, 8), "half", "sym4"])
def test_sixteen_rows_batched_match_mlx_lm(engine, quantized, kind):
    """A batched step of 16 rows (its products on the row tiles, or AMX's): every row's
    greedy ids are mlx-lm's own, one row at a time on MLX's kernels."""
    from mlx_notebook.cpu import ext as _ext
    from mlx_notebook.engine import Request

    path = quantized[kind]
    starts = "Once Rivers The def Hello A In It We Then So But If When Where How".split()
    prompts = [f"{w} the quick brown fox" for w in starts]
    ext = _ext.load()
    path16 = ext.path(16, kind[1] if isinstance(kind, tuple) else 4)
    before = ext.calls(path16)
    engine.max_batch = 16  # the default is 8
    reqs = [Request(p, model=path, chat=False, max_tokens=24, prefill_target_s=30) for p in prompts]
    res = [j.result(timeout=300) for j in engine.submit_many(reqs)]
    assert max(r.stats.batch_rows for r in res) == 16
    assert ext.calls(path16) > before
    check_against_mlx_lm(engine, path, prompts, 24, ours=res)


@pytest.mark.slow
def test_greedy_text_matches_mlx_lm_on_the_default_model_in_4_bits(engine):
    from mlx_notebook.models.default import default_gguf
    from mlx_notebook.models.gguf import convert_gguf

    path = str(convert_gguf(default_gguf(), "q"))
    prompts = ["The capital of France is", "Rivers flow", "Once upon a time, in a quiet village,"]
    check_against_mlx_lm(engine, path, prompts, 48)


def test_status_says_quantized_products_run_natively(engine, quantized):
    from mlx_notebook.cpu.threads import governor
    from mlx_notebook.engine import Request

    req = Request("Hello", model=quantized[64, 4], chat=False, max_tokens=3)
    engine.submit(req).result(timeout=60)
    notes = "\n".join(engine.info().notes)
    what = "quantized products, decode attention, fused layers"
    assert f"MLX extension ({what}): on native kernels" in notes
    from mlx_notebook.cpu import ext as _ext

    if governor().setters:  # OpenBLAS is loaded, so threads are governed: this one too
        assert _ext.thread_setter() in governor().setters


def test_default_q4_loads_the_files_own_4_bits_with_its_sampling(engine):
    from mlx_notebook.engine import Request

    r = engine.submit(Request("Hi", model="default:q4", max_tokens=4)).result(timeout=300)
    assert r.token_ids
    (info,) = [m for m in engine.info().models if m.name == "default:q4"]
    assert "211 quantized products native" in info.fast_path  # 210 4-bit + the 8-bit head
    lm = engine.registry.peek("default:q4")
    assert lm.defaults["temperature"] == 0.2  # the bundled model's own sampling


def test_the_default_model_is_its_4_bit_weights_on_cpu_when_the_kernels_are_there(monkeypatch):
    from mlx_notebook.cpu import ext as _ext
    from mlx_notebook.models.loader import VARIANT_ENV, default_variant

    monkeypatch.delenv(VARIANT_ENV, raising=False)
    assert _ext.load() is not None and default_variant() == "q"
    monkeypatch.setattr(_ext, "_state", {"module": None, "reason": "no C/C++ compiler"})
    assert default_variant() == "f32"  # MLX's own 4-bit kernel is a scalar loop on CPU
    for value, want in (("f32", "f32"), ("q4", "q"), ("q", "q")):
        monkeypatch.setenv(VARIANT_ENV, value)
        assert default_variant() == want


def test_a_quantized_model_is_described_by_its_bit_widths(engine, quantized):
    from mlx_notebook.engine import Request

    path = quantized[64, 8]
    engine.submit(Request("Hi", model=path, chat=False, max_tokens=2)).result(timeout=60)
    (info,) = [m for m in engine.info().models if m.name == path]
    assert info.dtype == "8-bit, float32"


def test_prefill_chunks_take_8_bit_inputs_and_decoding_keeps_16(engine, quantized):
    """With MLX_NOTEBOOK_PREFILL_INT8=1, each prefill chunk's products take 8-bit inputs;
    decode steps and verify passes keep 16 bits, so speculation gives plain decoding's ids
    (suffix drafts: the plain run's own text, accepted)."""
    from mlx_notebook.cpu import ext as _ext

    ext = _ext.load()
    with prefill_at_8_bits():
        if not _ext.prefill_inputs8():
            pytest.skip("no 8-bit prefill inputs here (no AVX-512 VNNI)")
        _eight_bit_prefill(engine, quantized, ext)


def _eight_bit_prefill(engine, quantized, ext):
    from mlx_notebook.engine import PrefillProgress, Request

    text = "one two three four five six seven eight nine ten, " * 4

    def run(prompt=text, reuse=False, **kw):
        before = ext.calls(6)
        job = engine.submit(
            Request(prompt, model=quantized["sym4"], chat=False, reuse_cache=reuse, **kw)
        )
        res = job.result(timeout=120)
        chunks = sum(isinstance(e, PrefillProgress) for e in job.events_so_far()) - 1
        return res, ext.calls(6) - before, chunks

    prefill, eights, chunks = run(max_tokens=1)
    per_chunk = eights // chunks
    assert chunks >= 1 and per_chunk >= 4 and eights == per_chunk * chunks  # 2 layers, a head
    plain, eights, chunks = run(max_tokens=24)
    assert eights == per_chunk * chunks  # 23 decode steps: none on 8-bit inputs
    spec, eights, chunks = run(max_tokens=24, draft="suffix", num_draft_tokens=4)
    assert spec.stats.draft_tokens_accepted > 0 and eights == per_chunk * chunks
    assert spec.token_ids == plain.token_ids
    # another text than 16-bit prefill's: the result cache's key has it (the precision)
    assert plain.stats.model["precision"] == "4-bit, float32, prefill on 8-bit inputs"
    # a chunk of one token (a decode step's shape) is a prefill's too: alone, and after
    # a cached prefix (the cache's buffer has room: a decode step's fused path would fit)
    short, eights, chunks = run("Hi", max_tokens=4)
    assert short.stats.prompt_tokens == 2 and (eights, chunks) == (per_chunk, 1)
    run(text, reuse=True, max_tokens=1)
    longer, eights, chunks = run(text + "xy", reuse=True, max_tokens=1)
    assert longer.stats.prompt_tokens - longer.stats.cached_tokens == 2
    assert (eights, chunks) == (per_chunk, 1)
    # two prompts at once prefill one at a time (a padded pass runs other layers, whose
    # float sums round to other 8-bit inputs), each as alone, silently; then decode together
    before = ext.calls(6)
    reqs = [
        Request(p, model=quantized["sym4"], chat=False, reuse_cache=False, max_tokens=n)
        for p, n in ((text, 24), ("Hi", 4))
    ]
    jobs = engine.submit_many(reqs)
    together = [j.result(timeout=120) for j in jobs]
    assert ext.calls(6) - before == 2 * per_chunk, [
        (r.stats.prompt_tokens, r.stats.cached_tokens, r.stats.prefill_chunk, r.stats.batch_rows)
        for r in together
    ]
    assert [r.token_ids for r in together] == [plain.token_ids, short.token_ids]
    assert max(r.stats.batch_rows for r in together) == 2
    assert not any("one at a time" in str(e) for j in jobs for e in j.events_so_far())
