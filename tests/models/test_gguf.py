"""GGUF -> MLX conversion: logits round trip, quantization, cache, atomicity."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from mlx_notebook.models import gguf as conv
from tests.gguf_fixture import build_tiny_gguf


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_NOTEBOOK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def logits_of(model, ids):
    import mlx.core as mx

    return np.array(model(mx.array([ids]))[0].astype(mx.float32))


def reference_model(hf, cfg):
    import mlx.core as mx
    from mlx_lm.models import llama

    model = llama.Model(llama.ModelArgs.from_dict(dict(cfg, rope_traditional=False)))
    model.load_weights([(k, mx.array(v)) for k, v in hf.items()])
    return model


@pytest.mark.parametrize("variant", ["f32", "q"])
def test_converted_logits_equal_source_weights_logits(engine, cache, tiny_gguf, variant):
    path, hf, cfg = tiny_gguf
    ids = [5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 200, 31]

    def run():
        from mlx_lm import load

        out = conv.convert_gguf(path, variant)
        model, _ = load(str(out))
        return out, logits_of(model, ids), logits_of(reference_model(hf, cfg), ids)

    out, ours, ref = engine.call(run).result()
    config = json.loads((out / "config.json").read_text())
    assert config["rope_traditional"] is True and config["tie_word_embeddings"] is True
    tol = 1e-3 if variant == "f32" else 2e-2
    np.testing.assert_allclose(ours, ref, atol=tol * np.abs(ref).max())
    assert (ours.argmax(-1) == ref.argmax(-1)).all()
    if variant == "q":
        q = config["quantization"]
        assert q["model.embed_tokens"] == {"group_size": 32, "bits": 8}
        assert q["model.layers.0.self_attn.q_proj"] == {"group_size": 32, "bits": 4}


def test_a_float32_gguf_loads_and_an_unloadable_cached_conversion_is_redone(
    engine, cache, tmp_path
):
    path, hf, cfg = build_tiny_gguf(tmp_path / "f32.gguf", float32=True)
    ids = [5, 17, 42, 99, 3, 250, 7, 64]

    def run():
        from mlx_lm import load

        out = conv.convert_gguf(path, "q")  # the default variant: its own precision
        model, _ = load(str(out))
        return out, logits_of(model, ids), logits_of(reference_model(hf, cfg), ids)

    out, ours, ref = engine.call(run).result()
    assert "quantization" not in json.loads((out / "config.json").read_text())
    np.testing.assert_allclose(ours, ref, atol=1e-3 * np.abs(ref).max())
    # What the converter wrote before: a cached directory mlx-lm cannot load.
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "quantization": {}}))
    older = conv.cache_path(path, "q", version="1")  # where the old converter put it
    older.mkdir(parents=True)
    (older / "config.json").write_text(json.dumps({**config, "quantization": {}}))
    again = conv.convert_gguf(path, "q")
    assert again == out and "quantization" not in json.loads((out / "config.json").read_text())
    assert not older.exists()  # an older version's conversion of this file is gone


def test_a_k_quant_embedding_is_stored_6_bit_not_float(engine, cache, tmp_path):
    # llama.cpp's quantizer writes the token embedding in Q6_K; MLX's reader gives it
    # back as float16, which a CPU load widened to float32: 4 bytes a weight.
    path, hf, cfg = build_tiny_gguf(tmp_path / "q6k.gguf", q6k_embedding=True)
    ids = [5, 17, 42, 99, 3, 250, 7, 64]

    def run():
        import mlx.core as mx
        from mlx_lm import load

        out = conv.convert_gguf(path, "q")
        model, _ = load(str(out))
        e = model.model.embed_tokens
        s, b = e.scales.astype(mx.float32), e.biases.astype(mx.float32)
        deq = mx.dequantize(e.weight, s, b, group_size=32, bits=6)
        raw = mx.load(str(path))["token_embd.weight"]
        return (out, type(e).__name__, np.array(deq), np.array(e.scales), str(raw.dtype),
                logits_of(model, ids), logits_of(reference_model(hf, cfg), ids))  # fmt: skip

    out, kind, deq, scales, raw_dtype, ours, ref = engine.call(run).result()
    assert raw_dtype == "mlx.core.float16"  # what MLX's reader makes of Q6_K
    q = json.loads((out / "config.json").read_text())["quantization"]
    assert q["model.embed_tokens"] == {"group_size": 32, "bits": 6} and kind == "QuantizedEmbedding"
    # Each of the file's values within a step of its group's 6-bit grid (half a step but
    # at the grid's top: tests/models/test_gguf_blocks.py), and the scale's float16
    # rounding (2**-11) over up to 32 steps.
    want = hf["model.embed_tokens.weight"]
    err = np.abs(deq - want).reshape(want.shape[0], -1, 32).max(-1)
    assert (err <= np.abs(scales) * (1 + 32 * 2**-11) + 1e-6).all()
    # The logits move with those errors (1.2 % of a weight, rms), on this random model
    # by 6 % (rms; 10 % at the most): a wrong layout would leave them unrelated (~1.4).
    assert np.sqrt(np.mean((ours - ref) ** 2) / np.mean(ref**2)) < 0.1


def test_wrong_rope_order_would_differ(engine, cache, tiny_gguf):
    # Guards the test above: un-permuting Q/K with traditional RoPE must not match.
    path, hf, cfg = tiny_gguf

    def run():
        right = reference_model(hf, cfg)
        import mlx.core as mx
        from mlx_lm.models import llama

        bad = llama.Model(llama.ModelArgs.from_dict(dict(cfg, rope_traditional=True)))
        bad.load_weights([(k, mx.array(v)) for k, v in hf.items()])
        ids = list(range(3, 40))
        return logits_of(bad, ids), logits_of(right, ids)

    bad, right = engine.call(run).result()
    assert np.abs(bad - right).max() > 1e-2


def test_second_load_does_not_convert_again(engine, cache, tiny_gguf, monkeypatch):
    path = tiny_gguf[0]
    first = engine.call(lambda: conv.convert_gguf(path, "q")).result()
    stamp = (first / "model.safetensors").stat().st_mtime_ns

    def must_not_run(*_a):
        raise AssertionError("converted again")

    monkeypatch.setattr(conv, "write_tokenizer", must_not_run)  # any conversion writes it
    again = engine.call(lambda: conv.convert_gguf(path, "q")).result()
    assert again == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert first.parent.parent == cache


def test_other_architecture_is_refused_by_name(engine, cache, tmp_path):
    path, _, _ = build_tiny_gguf(tmp_path / "falcon.gguf", arch="falcon")
    with pytest.raises(ValueError, match="'falcon'"):
        engine.call(lambda: conv.convert_gguf(path, "q")).result()
    assert not list((cache / "gguf").iterdir())  # nothing left behind


def test_killed_conversion_leaves_no_entry(cache, tiny_gguf, tmp_path):
    path = tiny_gguf[0]
    marker = tmp_path / "writing"
    script = textwrap.dedent(f"""
        import time, mlx_notebook
        from mlx_notebook.models import gguf as conv
        real = conv.write_tokenizer
        def slow(md, out):
            real(md, out)
            open({str(marker)!r}, "w").close()
            time.sleep(60)  # killed here: weights and tokenizer written, config not
        conv.write_tokenizer = slow
        conv.convert_gguf({str(path)!r}, "q")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ))
    try:
        deadline = time.time() + 60
        while not marker.exists():
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    final = conv.cache_path(path, "q")
    assert not final.exists()  # only a hidden temporary directory remains
    # The next load converts cleanly.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import mlx_notebook; from mlx_notebook.models import gguf as c;"
            f" print(c.convert_gguf({str(path)!r}, 'q'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(final)
    assert (final / "config.json").is_file() and (final / "tokenizer.json").is_file()
    assert [p.name for p in final.parent.iterdir()] == [final.name]  # leftovers removed


def test_stale_temp_dirs_go_on_a_cache_hit_but_live_ones_stay(cache, tiny_gguf):
    path = tiny_gguf[0]
    final = conv.convert_gguf(path, "q")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stale = final.parent / f".{final.name}.{conv.TMP_TAG}{dead}.abc123"
    live = final.parent / f".{final.name}.{conv.TMP_TAG}{os.getpid()}.def456"
    other = final.parent / ".not-ours"
    for d in (stale, live, other):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x" * 1000)
    assert conv.convert_gguf(path, "q") == final  # a cache hit
    assert not stale.exists() and live.exists() and other.exists()


@pytest.mark.parametrize(
    "arch",
    ["qwen2", "qwen3", "qwen3moe", "mixtral", "phi2", "phi2-fused", "phi3", "gemma", "gemma2",
     "gemma3"],
)  # fmt: skip
@pytest.mark.parametrize("qtype", [None, "Q8_0"])
def test_ggufs_of_each_architecture_load_and_decode_as_mlx_lm_does_on_the_same_weights(
    engine, cache, tmp_path, arch, qtype
):
    from mlx_lm.generate import generate_step

    from mlx_notebook.engine import Request
    from tests.gguf_arch_fixture import build_arch_gguf

    path = tmp_path / f"{arch}.gguf"
    TEXT = "The 12 ships sailed at dawn"
    ids = [5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 200, 31]

    def run():
        import mlx.core as mx
        from mlx_lm import load

        # here: the model's arrays are lazy. "-fused": Phi-2's q/k/v as one tensor
        _, ref = build_arch_gguf(
            path, arch.removesuffix("-fused"), qtype, fused_qkv="fused" in arch
        )
        out = conv.convert_gguf(path, "q")
        model, tok = load(str(out))
        prompt = mx.array(tok.encode(TEXT))
        want = [t for (t, _), _ in zip(generate_step(prompt, ref), range(8))]
        return out, logits_of(model, ids), logits_of(ref, ids), want

    out, ours, want_logits, want = engine.call(run).result()
    config = json.loads((out / "config.json").read_text())
    types = {"gemma3": "gemma3_text", "qwen3moe": "qwen3_moe", "phi2": "phi", "phi2-fused": "phi"}
    assert config["model_type"] == types.get(arch, arch)
    assert config["rope_traditional"] is (arch == "mixtral")  # llama's Q/K order
    assert ("quantization" in config) == (qtype is not None)
    np.testing.assert_allclose(ours, want_logits, atol=2e-2 * np.abs(want_logits).max())
    assert (ours.argmax(-1) == want_logits.argmax(-1)).all()
    if qtype is None:  # float32 weights: the engine's greedy ids are mlx-lm's (fast path on)
        res = engine.submit(
            Request(
                TEXT, model=str(path), chat=False, max_tokens=8, temperature=0, repetition_penalty=1
            )  # fmt: skip
        ).result(timeout=300)
        assert res.token_ids == want


@pytest.mark.parametrize("qtype", ["F16", "BF16"])
def test_half_precision_ggufs_load_at_their_precision_and_decode_as_mlx_lm_does(
    engine, cache, tmp_path, qtype
):
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    from mlx_notebook.engine import Request
    from tests.gguf_arch_fixture import build_arch_gguf

    path, text = tmp_path / f"{qtype}.gguf", "The 12 ships sailed at dawn"

    def run():
        from mlx_lm import load

        _, ref = build_arch_gguf(path, "qwen2", qtype)
        out = conv.convert_gguf(path, "q")
        _, tok = load(str(out))
        want = [t for (t, _), _ in zip(generate_step(mx.array(tok.encode(text)), ref), range(8))]
        stored = mx.load(str(out / "model.safetensors"))["model.layers.0.mlp.up_proj.weight"]
        return out, want, str(stored.dtype)

    out, want, dtype = engine.call(run).result()
    assert dtype == {"F16": "mlx.core.float16", "BF16": "mlx.core.bfloat16"}[qtype]
    assert "quantization" not in json.loads((out / "config.json").read_text())
    res = engine.submit(
        Request(text, model=str(path), chat=False, max_tokens=8, temperature=0,
                repetition_penalty=1)
    ).result(timeout=300)  # fmt: skip
    assert res.token_ids == want  # computed in float32 on the CPU, as mlx-lm's reference


def test_phi3_longrope_kept_only_as_two_tensors_is_given_back(engine, cache, tmp_path):
    # Phi-3's 128k variants: llama.cpp keeps LongRoPE's factors as rope_factors_long and
    # rope_factors_short, and the context they scale from as a key.
    from tests.gguf_arch_fixture import build_arch_gguf

    rope = {"type": "longrope", "long_factor": [1.0, 2.5, 7.0, 30.0],
            "short_factor": [1.0, 1.1, 1.3, 2.0]}  # fmt: skip
    # 600 positions, past the original 512: the long factors apply (ids in the vocabulary).
    ids = [5 + (7 * i) % 240 for i in range(600)]

    def run():
        from mlx_lm import load

        path, ref = build_arch_gguf(tmp_path / "phi3.gguf", "phi3", longrope=rope)
        out = conv.convert_gguf(path, "q")
        return out, logits_of(load(str(out))[0], ids), logits_of(ref, ids)

    out, ours, want = engine.call(run).result()
    config = json.loads((out / "config.json").read_text())
    assert config["rope_scaling"] == rope and config["partial_rotary_factor"] == 0.5
    assert config["original_max_position_embeddings"] == 512
    np.testing.assert_allclose(ours, want, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize(
    "pre, text, pieces",
    [
        ("llama-bpe", "I'm 12345", ["I", "'m", "Ġ", "123", "45"]),
        ("qwen2", "I'm 123", ["I", "'m", "Ġ", "1", "2", "3"]),
        ("smollm", "a  b\n\nc", ["a", "Ġ", "Ġb", "Ċ", "Ċ", "c"]),
        ("qwen2", "a  b\n\nc", ["a", "Ġ", "Ġb", "ĊĊ", "c"]),
        # tekken: case runs split words, single digits, no contractions, "/" kept
        ("phi-2", "I'm 12345", ["I", "'m", "Ġ12345"]),  # GPT-2's: no digit split
        ("tekken", "HelloWorld I'm 123", ["Hello", "World", "ĠI", "'m", "Ġ", "1", "2", "3"]),
        ("tekken", "a/\nb ÉtéX", ["a", "/Ċ", "b", "ĠÃītÃ©", "X"]),
    ],
)
def test_llama3_and_qwen_pre_tokenizers_split_as_their_regexes(pre, text, pieces):
    from mlx_notebook.models.gguf_tokenizer import _pre_tokenizer

    assert [w for w, _ in _pre_tokenizer(pre).pre_tokenize_str(text)] == pieces


@pytest.mark.parametrize("kind", ["IQ4_NL", "MXFP4"])
def test_a_tensor_type_not_read_is_refused_in_one_line_naming_it(cache, tmp_path, kind):
    import gguf

    from tests.gguf_fixture import write_out

    # Raw blocks: the refusal reads only as far as the header.
    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    T = getattr(gguf.GGMLQuantizationType, kind)
    _, size = gguf.GGML_QUANT_SIZES[T]
    w.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight"):
        w.add_tensor(name, np.zeros((8, 8 * size), dtype=np.uint8), raw_dtype=T)
    write_out(w)
    assert gguf.GGUFReader(str(path)).tensors[1].tensor_type.name == kind
    with pytest.raises(ValueError) as err:
        conv.convert_gguf(path, "q")
    msg = str(err.value)
    assert "\n" not in msg and f"GGUF tensor type {kind} is not supported (" in msg
    assert " more, in q.gguf)" in msg
    assert not list((cache / "gguf").iterdir())  # nothing left behind


def test_llama3_rope_scaling_kept_only_as_rope_freqs_is_given_back(engine, cache, tmp_path):
    from mlx_notebook.engine import Request

    scaling = {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    path, hf, cfg = build_tiny_gguf(tmp_path / "l3.gguf", float32=True, rope_scaling=scaling)
    ids = [5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 200, 31]
    text = "The 12 ships sailed at dawn"

    def run():
        import mlx.core as mx
        from mlx_lm import load
        from mlx_lm.generate import generate_step

        out = conv.convert_gguf(path, "q")
        model, tok = load(str(out))
        unscaled = reference_model(hf, {k: v for k, v in cfg.items() if k != "rope_scaling"})
        ref = reference_model(hf, cfg)
        steps = generate_step(mx.array(tok.encode(text)), ref)
        want = [t for (t, _), _ in zip(steps, range(8))]
        return out, logits_of(model, ids), logits_of(ref, ids), logits_of(unscaled, ids), want

    out, ours, ref, unscaled, want = engine.call(run).result()
    assert json.loads((out / "config.json").read_text())["rope_scaling"] == scaling
    # Dropping the tensor would give the unscaled model's logits: ours are 100 times nearer.
    assert np.abs(ours - ref).max() * 100 < np.abs(unscaled - ref).max()
    res = engine.submit(
        Request(text, model=str(path), chat=False, max_tokens=8, temperature=0,
                repetition_penalty=1)
    ).result(timeout=300)  # fmt: skip
    assert res.token_ids == want  # the engine (fast path on) decodes as mlx-lm does


def test_rope_freqs_no_llama3_scaling_gives_are_refused(engine, cache, tmp_path):
    import mlx.core as mx

    from mlx_notebook.models.gguf_rope import llama3_scaling

    def run():
        odd = mx.array([1.0, 2.0, 3.0, 1.0, 5.0, 1.0, 1.0, 9.0])
        return llama3_scaling(mx.ones(8), 16, 1e4), odd

    none, odd = engine.call(run).result()
    assert none is None  # every divisor 1: no scaling
    with pytest.raises(ValueError, match="no Llama 3 RoPE scaling gives"):
        engine.call(lambda: llama3_scaling(odd, 16, 1e4, "x.gguf")).result()
