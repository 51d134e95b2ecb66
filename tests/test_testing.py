from mlx_lm import load

from mlx_notebook.testing import build_tiny_model


def test_tiny_model_builds_and_loads_fast(engine, tmp_path):
    # What keeps it fast, measured in bytes: a few hundred kB of weights.
    path = build_tiny_model(tmp_path / "m")
    assert (path / "model.safetensors").stat().st_size < 1_000_000

    def run():
        model, tok = load(str(path))
        return model, tok

    model, tok = engine.call(run).result()
    from mlx.utils import tree_flatten

    assert sum(v.size for _, v in tree_flatten(model.parameters())) < 200_000
    assert tok.decode(tok.encode("Hello world")) == "Hello world"  # a real BPE tokenizer
