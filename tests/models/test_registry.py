import pytest

from mlx_notebook.models import Registry
from mlx_notebook.testing import build_tiny_model


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return [str(build_tiny_model(tmp_path_factory.mktemp(f"m{i}"), seed=i)) for i in range(3)]


def test_cached_by_resolved_spec_and_lru(engine, dirs):
    reg = Registry(max_loaded=2)

    def run():
        a = reg.get(dirs[0])
        assert reg.get(dirs[0]) is a
        reg.get(dirs[1])
        reg.get(dirs[0])  # touch a: b becomes least recently used
        reg.get(dirs[2])
        return [m["name"] for m in reg.snapshot()]

    names = engine.call(run).result()
    assert names == [dirs[0], dirs[2]]


def test_pinned_model_is_not_evicted(engine, dirs):
    reg = Registry(max_loaded=1)

    def run():
        a = reg.get(dirs[0])
        reg.get(dirs[1], pin=a.name)
        return [m["name"] for m in reg.snapshot()]

    assert engine.call(run).result() == [dirs[0], dirs[1]]


def test_unload_and_snapshot(engine, dirs):
    from mlx_notebook.engine import Request

    engine.submit(Request("hi", model=dirs[0], max_tokens=2)).result(timeout=30)
    info = engine.info().models
    assert info[0].name == dirs[0] and info[0].memory_mb > 0 and info[0].dtype == "float32"
    assert engine.unload(dirs[0]).names == [dirs[0]]
    assert engine.info().models == ()
    assert engine.unload("nothing").names == []


def test_same_tokenizer_same_vocab_key(engine, dirs):
    reg = Registry(max_loaded=3)
    keys = engine.call(lambda: {reg.get(d).vocab_key for d in dirs}).result()
    assert len(keys) == 1


def test_another_spelling_of_a_loaded_dir_is_not_loaded_again(engine, dirs, monkeypatch):
    import os

    reg = Registry(max_loaded=2)
    parent, name = os.path.split(dirs[0])
    monkeypatch.chdir(parent)

    def run():
        a = reg.get(dirs[0])
        return a, reg.get(f"./{name}"), reg.get(name + "/")

    a, b, c = engine.call(run).result()
    assert a is b is c and len(reg.snapshot()) == 1


def test_file_fingerprint_matches_loaded_fingerprint(engine, dirs):
    from mlx_notebook.models.vocab import spec_fingerprint

    reg = Registry(max_loaded=1)
    loaded = engine.call(lambda: reg.get(dirs[0]).vocab_key).result()
    assert spec_fingerprint(dirs[0]) == loaded
    assert spec_fingerprint("some/hub-id") is None


def test_a_model_that_cannot_run_here_is_refused_at_load_then_at_submit(engine, dirs):
    import mlx.core as mx
    from mlx_lm import load

    from mlx_notebook.engine import Request
    from mlx_notebook.engine.local.checks import check_request
    from mlx_notebook.models.loader import _probe
    from mlx_notebook.models.spec import ModelCannotRun, ModelUnavailable

    def broken():  # weights that no longer fit their layers: every device fails
        model, tok = load(dirs[0])
        model.model.embed_tokens.weight = mx.zeros((5, 3))
        _probe(dirs[0], model)
        return dirs[0], model, tok, dirs[0]

    reg = Registry(loader=lambda spec: broken())
    with pytest.raises(ModelCannotRun, match=r"cannot run on Device\((cpu|gpu)"):
        engine.call(lambda: reg.get(dirs[0])).result()
    assert not reg.loaded(dirs[0]) and reg.refused(dirs[0]).startswith(f"{dirs[0]}: cannot run")
    with pytest.raises(ModelUnavailable, match="cannot run on") as err:
        check_request(Request("Hi", model=dirs[0], chat=False), reg)
    assert "\n" not in str(err.value)
    assert check_request(Request("Hi", model=dirs[1], chat=False), reg).key == dirs[1]
    reg.unload(dirs[0])  # `%mlx unload`: tried again at the next load
    assert reg.refused(dirs[0]) is None
    assert check_request(Request("Hi", model=dirs[0], chat=False), reg).key == dirs[0]
