import time

from mlx_lm import load

from mlx_notebook.testing import build_tiny_model


def test_tiny_model_builds_and_loads_fast(engine, tmp_path):
    t0 = time.perf_counter()
    path = build_tiny_model(tmp_path / "m")
    built = time.perf_counter() - t0

    def run():
        t = time.perf_counter()
        model, tok = load(str(path))
        return time.perf_counter() - t, tok

    loaded, tok = engine.call(run).result()
    assert loaded < 1.0 and built < 5.0
    assert tok.decode(tok.encode("Hello world")) == "Hello world"  # a real BPE tokenizer
