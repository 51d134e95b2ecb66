"""The CPU fast path: the swapped modules compute the same thing, only on CPU, and
greedy text matches mlx-lm's with the fast path off (or differs at a near-tie)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mlx_notebook  # noqa: F401 - loads OpenBLAS and the sgemv shim first
from mlx_notebook.cpu import fast as cpu_fast
from tests.cpu.test_dots import dots_on


def max_diff(a, b):
    import mlx.core as mx

    return mx.abs(a - b).max().item()


def test_fused_rms_norm_matches_mlx():
    import mlx.core as mx
    import mlx.nn as nn

    ref = nn.RMSNorm(576, eps=1e-5)
    ref.weight = mx.random.normal((576,))
    x = mx.random.normal((2, 7, 576)) * 3
    assert max_diff(ref(x), cpu_fast.FusedRMSNorm(ref.weight, ref.eps)(x)) < 1e-5


@pytest.mark.parametrize("traditional", [True, False])
@pytest.mark.parametrize("dims,scale", [(64, 1.0), (32, 1.0), (64, 0.5)])
@pytest.mark.parametrize("offset", [0, 37, 5000])
def test_table_rope_matches_mlx(traditional, dims, scale, offset):
    import mlx.core as mx
    import mlx.nn as nn

    ref = nn.RoPE(dims, traditional=traditional, base=10000.0, scale=scale)
    fast = cpu_fast.TableRoPE(dims, traditional, 10000.0, scale)
    x = mx.random.normal((1, 9, 5, 64))
    # float32 sin/cos of large angles differ in the last bits between the two ways
    tol = 1e-4 if offset < 1000 else 2e-3
    assert max_diff(ref(x, offset=offset), fast(x, offset=offset)) < tol


def test_step_rows_are_taken_once_per_step_and_pinned_rows_answer_batches():
    import mlx.core as mx

    t = cpu_fast.RopeTable(64, 10000.0, 1.0)
    for traditional, (c, s) in ((False, (t.cos, t.sin)), (True, (t.cos2, t.sin2))):
        rows = t.step_rows(37, 1, traditional)
        assert rows is t.step_rows(37, 1, traditional)  # every layer shares them
        assert mx.array_equal(rows[0], c[37:38]) and mx.array_equal(rows[1], s[37:38])
    assert t.step_rows(3000, 1, False)[0].shape == (1, 32) and t.size >= 3001  # grown
    offsets = mx.array([4, 9])
    assert t.step_rows(offsets, 2, True) is None  # positions in an array: not read
    t.pin([4, 9])
    cos, sin = t.step_rows(offsets, 2, True)
    assert cos.shape == (2, 64) and mx.array_equal(sin[1], t.sin2[9])
    assert t.step_rows(offsets, 3, True) is None  # pinned for another batch
    t.pin(None)
    assert t.step_rows(offsets, 2, True) is None


def _swappable_model():
    from mlx_lm.models import llama

    from mlx_notebook.testing import tiny_config

    return llama.Model(llama.ModelArgs.from_dict(tiny_config(384, rope_traditional=True)))


def test_applied_on_cpu_only_and_not_when_switched_off(monkeypatch):
    import mlx.nn as nn

    assert cpu_fast.apply(_swappable_model(), "gpu") == []
    m = _swappable_model()
    monkeypatch.setenv("MLX_NOTEBOOK_FAST", "0")
    assert cpu_fast.apply(m, "cpu") == []
    monkeypatch.delenv("MLX_NOTEBOOK_FAST")
    assert cpu_fast.apply(m, "cpu") == [
        "5 RMSNorm",
        "2 RoPE",
        "2 gate/up stacked",
        "2 q/k/v stacked",
        "fused prefill attention",  # when the native library is loaded, as here
    ]
    assert not any(isinstance(x, (nn.RMSNorm, nn.RoPE)) for _, x in m.named_modules())


def test_loaded_models_report_the_fast_path(engine, tiny_dir):
    from mlx_notebook.engine import Request

    engine.submit(Request("hi", model=tiny_dir, chat=False, max_tokens=2)).result(timeout=30)
    (m,) = engine.info().models
    assert m.fast_path[:-1] == (
        "5 RMSNorm", "2 RoPE", "2 gate/up stacked", "2 q/k/v stacked", "fused prefill attention",
        "2 layers fused",
    )  # fmt: skip
    assert m.fast_path[-1].startswith("weights on ")  # huge pages or why not (test_cpu_pages)


# Greedy tokens of mlx-lm itself, with the fast path off, in a fresh process.
REFERENCE = textwrap.dedent("""
    import json, sys
    import mlx_notebook  # OpenBLAS as in the engine; MLX_NOTEBOOK_FAST=0: no shim, no swaps
    import mlx.core as mx
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler
    path, prompts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    ours = json.loads(sys.argv[4])
    model, tok = load(path)
    model.set_dtype(mx.float32)
    out = []
    for p, mine in zip(prompts, ours):
        ids = [r.token for r in stream_generate(model, tok, p, max_tokens=n,
                                                 sampler=make_sampler(0.0))]
        margin = None
        diff = next((i for i, (a, b) in enumerate(zip(ids, mine)) if a != b), None)
        if diff is not None:
            prompt = tok.encode(p) if isinstance(p, str) else p
            logits = model(mx.array([list(prompt) + ids[:diff]]))[0, -1]
            top = mx.sort(logits)[-2:].tolist()
            margin = top[1] - top[0]
        out.append({"ids": ids, "diff": diff, "margin": margin})
    print(json.dumps(out))
""")


def check_against_mlx_lm(engine, path, prompts, n, ours=None):
    """Each prompt's greedy ids (run one at a time, or `ours` as given) equal mlx-lm's own,
    or differ first at a near-tie."""
    from mlx_notebook.engine import Request

    ours = ours or [
        engine.submit(Request(p, model=path, chat=False, max_tokens=n)).result(timeout=300)
        for p in prompts
    ]
    assert all(engine.info().models[-1].fast_path for _ in ours)  # it was on
    # Stock mlx-lm has no governor: with both OpenBLAS threads on a busy machine its
    # threads spin and it crawls. One thread gives the same products (split by rows).
    env = {**os.environ, "MLX_NOTEBOOK_FAST": "0", "OPENBLAS_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-c", REFERENCE, path, json.dumps(prompts), str(n),
         json.dumps([r.token_ids for r in ours])],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    eos = set(engine.registry.peek(path).tokenizer.eos_token_ids)
    # A near-tie: float sums in another order move logits by ~1e-5; a quantized model's
    # inputs rounded to 16 bits (integer dots, tests/cpu/test_dots.py) by ~1e-4.
    dots = "quantization" in json.loads(Path(path, "config.json").read_text())
    near = 1e-3 if dots and dots_on() else 1e-4
    for r, ref in zip(ours, json.loads(res.stdout)):
        mine = [t for t in r.token_ids if t not in eos]
        theirs = [t for t in ref["ids"] if t not in eos]
        assert len(mine) >= 8 and len(theirs) >= 8
        if ref["diff"] is None:
            assert mine == theirs, (mine, theirs)
        else:  # allowed only at a numerical near-tie
            assert ref["margin"] < near, ref


def test_greedy_text_matches_mlx_lm_on_the_tiny_model(engine, tiny_dir):
    prompts = ["Hello world. The quick brown fox", "Rivers flow to the sea;", "def main():"]
    check_against_mlx_lm(engine, tiny_dir, prompts, 40)


@pytest.mark.slow
def test_greedy_text_matches_mlx_lm_on_the_default_model(engine):
    from mlx_notebook.models.default import default_gguf
    from mlx_notebook.models.gguf import convert_gguf

    path = str(convert_gguf(default_gguf(), "f32"))
    prompts = ["The capital of France is", "Rivers flow", "Once upon a time, in a quiet village,"]
    check_against_mlx_lm(engine, path, prompts, 48)


def test_fidelity_tests_pass_with_the_fast_path_off(tiny_dir):
    env = {**os.environ, "MLX_NOTEBOOK_FAST": "0"}
    tests = os.path.join(os.path.dirname(__file__), os.pardir, "engine")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         os.path.join(tests, "decoding", "test_speculative.py"),
         os.path.join(tests, "cache", "test_prompt_cache.py"),
         os.path.join(tests, "local", "test_batch.py")],  # batched rows: per-row offsets
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:]


def test_gemma_one_plus_norms_are_fused_and_equal(tmp_path):
    import mlx.core as mx
    from mlx_lm import load

    from mlx_notebook.cpu import fast as cpu_fast
    from mlx_notebook.testing.families import build_family

    path = str(build_family("gemma3_text", tmp_path / "g"))
    plain, fast = load(path)[0], load(path)[0]
    assert any("RMSNorm" in c for c in cpu_fast.apply(fast, "cpu"))
    fused = [
        m for _, m in fast.named_modules() if isinstance(m, cpu_fast.FusedRMSNorm) and m.one_plus
    ]
    assert len(fused) >= 3 * 4  # four norms in each of three layers
    ids = mx.array([[5, 9, 33, 80, 120, 7, 7, 200, 31, 64, 12]])
    assert mx.allclose(plain(ids), fast(ids), atol=1e-4).item()
