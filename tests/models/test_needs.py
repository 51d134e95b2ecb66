"""Metal-only layers elsewhere: bitnet's run as 2-bit layers; fused kernels refused at submit."""

from __future__ import annotations

import importlib.util
import json

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm.models.bitlinear_layers import BitLinear

from mlx_notebook.models import needs

needs_no_metal = pytest.mark.skipif(
    needs.metal_runs_kernels(), reason="Metal runs bitnet's own kernel"
)


def _bitlinear(inp, out, *, invert=False, bias=False, seed=0):
    """A BitLinear with random fields 0..2 and a scale of 0.37; also its weights, unpacked."""
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 3, size=(4, out // 4, inp))
    layer = BitLinear(inp, out, bias=bias, invert_weight_scales=invert)
    layer.weight = mx.array((f[0] | f[1] << 2 | f[2] << 4 | f[3] << 6).astype(np.uint8))
    layer.weight_scale = mx.array([0.37], dtype=mx.float32)
    if bias:
        layer.bias = mx.array(rng.normal(size=out).astype(np.float32))
    w = np.concatenate([f[k] - 1 for k in range(4)]).astype(np.float64)  # rows k * out/4 + r
    return layer, w * (1 / 0.37 if invert else 0.37)


@pytest.mark.parametrize(
    ("inp", "invert", "bias", "kind", "group"),
    [
        (256, False, True, nn.QuantizedLinear, 128),
        (64, True, False, nn.QuantizedLinear, 64),
        (96, False, False, nn.QuantizedLinear, 32),
        (48, True, True, nn.Linear, None),  # no group size divides 48: dense weights
    ],
)
def test_a_layer_keeps_the_kernels_values(inp, invert, bias, kind, group):
    layer, w = _bitlinear(inp, 32, invert=invert, bias=bias)
    new = needs.ternary_layer(layer)
    assert type(new) is kind
    if group:
        assert (new.bits, new.group_size, new.weight.dtype) == (2, group, mx.uint32)
        assert new.weight.shape == (32, inp // 16)  # 2 bits a weight, as packed
    x = np.random.default_rng(1).normal(size=(3, inp))
    want = x @ w.T + (np.array(layer.bias) if bias else 0)
    got = np.array(new(mx.array(x.astype(np.float32))))
    assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()
    assert ("bias" in new) == bias


def test_the_unpacked_fields_follow_the_kernels_layout():
    layer = BitLinear(4, 8, bias=False)
    # One byte per (row r, input i): fields k = 0..3 are rows r, r + 2, r + 4, r + 6.
    layer.weight = mx.array([[0b10_01_00_10] * 4, [0b00_00_00_01] * 4], dtype=mx.uint8)
    rows = np.array(needs.unpacked(layer))[:, 0].tolist()
    assert rows == [1, 0, -1, -1, 0, -1, 1, -1]


@needs_no_metal
def test_a_model_loses_every_bitlinear_and_others_are_untouched():
    from mlx_lm.models import bitnet, llama

    args = dict(
        hidden_size=64, num_hidden_layers=1, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=32, head_dim=16,
    )  # fmt: skip
    model = bitnet.Model(bitnet.ModelArgs(model_type="bitnet", **args))
    model.set_dtype(mx.bfloat16)  # as mlx-community's bitnet files are
    assert needs.portable(model) == 7  # q, k, v, o, gate, up, down
    assert not [m for _, m in model.named_modules() if isinstance(m, BitLinear)]
    scales = {m.scales.dtype for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)}
    assert scales == {mx.float32 if mx.default_device() == mx.cpu else mx.bfloat16}
    mx.eval(model(mx.array([[1, 2, 3]])))  # runs here
    plain = llama.Model(llama.ModelArgs(model_type="llama", **args))
    assert needs.portable(plain) == 0


def test_rows_not_a_multiple_of_four_are_refused():
    layer = BitLinear(64, 6, bias=False)
    with pytest.raises(ValueError, match="6 rows"):
        needs.ternary_layer(layer)


def _model_dir(tmp_path, model_type):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    return str(tmp_path)


@needs_no_metal
def test_a_family_on_fused_metal_kernels_is_refused_from_its_files(tmp_path):
    why = needs.refusal(_model_dir(tmp_path, "muse_spark"))
    assert why.startswith(f"{tmp_path}: cannot run on ") and "\n" not in why
    assert "'muse_spark' layers run mlx-lm's Metal kernels (expert_routing," in why


@needs_no_metal
@pytest.mark.parametrize("kind", ["llama", "bitnet", "rwkv7", "no_such_family", 7])
def test_others_and_unknowns_are_left_to_their_load(tmp_path, kind):
    # rwkv7 calls metal_kernel itself, on a GPU only: its load measures whether it runs.
    assert needs.refusal(_model_dir(tmp_path, kind)) is None
    assert needs.refusal(str(tmp_path / "missing")) is None
    assert needs.refusal("default:q4") is None
    assert needs.refusal("someone/not-in-the-cache") is None


def test_kernels_and_absent_packages_are_read_from_every_import_form(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    files = {
        "a": "from .b import Block\nfrom .base import x\n",  # follows b, and base (none)
        "b": "from .a import y\nfrom ..kernels import k2, k1\n",  # a -> b -> a: no loop
        "c": "from mlx_lm.kernels.k3 import k3\nimport mlx_lm.kernels.k4\n",
        "d": "from .. import kernels\n",
        "e": "from . import c\n",
        # Not mlx-lm's kernels: Hugging Face's `kernels` package, a models/kernels module.
        "f": "from kernels.x import k5\nfrom .kernels.y import k6\nfrom . import nothing\n",
    }
    absent = {
        "g": "try:\n    import absent_g\nexcept ImportError:\n"
        "    print('To run g: pip install g')\n    sys.exit(1)\n",  # olmo's form
        "h": "try:\n    import absent_h\nexcept ImportError:\n    absent_h = None\n",  # optional
        "i": "import json\nimport absent_i.sub\nfrom absent_j import x\n",
        "k": "def f():\n    import absent_k\n",  # imported only when called
        "m": "from .g import A\n",
        # Optional: no statement of the handler itself exits or raises.
        "n": "try:\n    import absent_n\nexcept ImportError:\n"
        "    def op(*a):\n        raise ImportError('no')\n"
        "    if FLAG:\n        raise\n",
        "o": "try:\n    from .g import A\nexcept ImportError:\n    A = None\n",
        "p": "try:\n    import absent_p\nexcept ImportError as e:\n"
        "    raise RuntimeError('p') from e\n",
    }
    files.update(absent)
    for name, text in files.items():
        (models / f"{name}.py").write_text(text)
    monkeypatch.setattr(needs, "_models_dir", lambda: models)
    needs._needs.cache_clear()
    try:
        found = {name: needs.fused_kernels(name) for name in files}
        missing = {
            name: tuple(p for p in needs._needs(name)[1] if not needs._installed(p[0]))
            for name in absent
        }
    finally:
        needs._needs.cache_clear()
    assert found == {
        "a": ("k1", "k2"),
        "b": ("k1", "k2"),
        "c": ("k3", "mlx_lm.kernels.k4"),
        "d": ("kernels",),
        "e": ("k3", "mlx_lm.kernels.k4"),
        "f": (),
        **dict.fromkeys(absent, ()),
    }
    assert missing == {
        "g": (("absent_g", "To run g: pip install g"),),
        "h": (),
        "i": (("absent_i", ""), ("absent_j", "")),
        "k": (),
        "m": (("absent_g", "To run g: pip install g"),),
        "n": (),
        "o": (),
        "p": (("absent_p", ""),),
    }


def test_an_install_is_seen_at_the_next_check(tmp_path, monkeypatch):
    name = "mlxnb_absent_pkg"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not needs._installed(name)
    (tmp_path / f"{name}.py").write_text("")  # pip install, say
    assert needs._installed(name)  # no restart


def test_the_scales_keep_the_models_dtype_unless_told():
    layer, w = _bitlinear(128, 32)
    layer.weight_scale = layer.weight_scale.astype(mx.bfloat16)
    assert needs.ternary_layer(layer, mx.float32).scales.dtype == mx.float32  # the CPU's
    new = needs.ternary_layer(layer)  # CUDA's: the model's own dtype
    assert new.scales.dtype == new.biases.dtype == mx.bfloat16
    x = np.random.default_rng(2).normal(size=(2, 128)).astype(np.float32)
    got = np.array(new(mx.array(x, dtype=mx.bfloat16)).astype(mx.float32))
    want = x @ w.T
    assert np.abs(got - want).max() < 2e-2 * np.abs(want).max()  # bfloat16's precision


@pytest.mark.skipif(bool(importlib.util.find_spec("hf_olmo")), reason="ai2-olmo is installed")
def test_a_family_whose_package_is_absent_is_refused_with_mlx_lms_hint(tmp_path):
    # mlx-lm's olmo module prints a hint and calls sys.exit(1) without ai2-olmo.
    why = needs.refusal(_model_dir(tmp_path, "olmo"))
    assert why == (
        f"{tmp_path}: mlx-lm's 'olmo' layers import hf_olmo, which is not installed"
        " (mlx-lm says: To run olmo install ai2-olmo: pip install ai2-olmo)"
    )


def test_a_model_module_that_exits_at_import_fails_its_load_in_one_line(tmp_path, monkeypatch):
    import mlx_lm

    from mlx_notebook.models.loader import load_spec
    from mlx_notebook.models.spec import ModelCannotRun

    def exits(path):
        raise SystemExit(1)  # as mlx-lm's olmo module does without ai2-olmo

    monkeypatch.setattr(mlx_lm, "load", exits)
    path = _model_dir(tmp_path / "llama", "llama")  # nothing its files say is missing
    with pytest.raises(ModelCannotRun) as err:
        load_spec(path)
    assert str(err.value) == f"{path}: mlx-lm exited while importing its model (exit code 1)"
    if not importlib.util.find_spec("hf_olmo"):  # what its files say, when they say it
        olmo = _model_dir(tmp_path / "olmo", "olmo")
        with pytest.raises(ModelCannotRun) as err:
            load_spec(olmo)
        assert str(err.value) == needs.refusal(olmo) and "\n" not in str(err.value)
