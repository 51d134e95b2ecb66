"""A model's generation_config.json sets the sampling a request leaves unset."""

import json
import shutil

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.defaults import describe, in_force
from mlx_notebook.models.generation import read_defaults
from mlx_notebook.notebook.views.render import stats_line

SAMPLES = {"do_sample": True, "temperature": 0.7, "top_k": 5, "top_p": 0.9}


def write(tmp_path, cfg):
    (tmp_path / "generation_config.json").write_text(json.dumps(cfg))
    return tmp_path


@pytest.mark.parametrize(
    "cfg, want",
    [
        (SAMPLES, {"temperature": 0.7, "top_k": 5, "top_p": 0.9}),
        # As in transformers: without do_sample the listed temperature is not used.
        (
            {"temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.1},
            {"repetition_penalty": 1.1},
        ),
        ({"do_sample": True}, {"temperature": 1.0}),
        ({"do_sample": True, "temperature": -1, "top_p": 2, "top_k": 1.5}, {"temperature": 1.0}),
        ({"do_sample": True, "temperature": 0.5, "repetition_penalty": 1.0}, {"temperature": 0.5}),
        ({"eos_token_id": 2}, {}),
        ([1, 2], {}),
    ],
)
def test_read_defaults_follows_transformers_and_drops_bad_values(tmp_path, cfg, want):
    assert read_defaults(write(tmp_path, cfg)) == want


def test_no_file_or_no_path_means_no_defaults(tmp_path):
    assert read_defaults(tmp_path) == {} and read_defaults(None) == {}
    (tmp_path / "generation_config.json").write_text("{not json")
    assert read_defaults(tmp_path) == {}


def test_explicit_values_win_and_unset_ones_fall_back():
    req = Request("hi", temperature=0.0, top_k=None)
    got = in_force(req, {"temperature": 0.7, "top_k": 5})
    assert got["temperature"] == 0.0 and got["top_k"] == 5 and got["top_p"] == 1.0
    assert got["from_model"] == ["top_k"]
    assert describe(got) == "greedy"  # top_k came from the model, but greedy ignores it
    assert describe(in_force(Request("hi"), {"temperature": 0.0})) == "greedy (model defaults)"
    assert describe(in_force(Request("hi"), {})) == "greedy"


@pytest.fixture
def sampling_dir(tiny_dir, tmp_path):
    d = tmp_path / "sampling"
    shutil.copytree(tiny_dir, d)
    write(d, SAMPLES)
    return str(d)


def test_a_request_that_sets_nothing_samples_as_the_model_says(engine, sampling_dir):
    def run(**kw):
        r = Request("The quick brown fox", model=sampling_dir, chat=False, max_tokens=24, **kw)
        return engine.submit(r).result(timeout=60)

    by_model = run(seed=3)
    spelled_out = run(seed=3, temperature=0.7, top_k=5, top_p=0.9)
    greedy = run(temperature=0.0)
    assert by_model.token_ids == spelled_out.token_ids  # the same sampler, the same draw
    assert by_model.token_ids != greedy.token_ids
    assert by_model.stats.sampling["from_model"] == ["temperature", "top_p", "top_k"]
    assert spelled_out.stats.sampling["from_model"] == []
    assert "temperature 0.7 · top_p 0.9 · top_k 5 (model defaults)" in stats_line(by_model)
    assert " greedy (model defaults) · " not in stats_line(greedy)
    status = engine.info().format()
    want = "sampling by default: temperature 0.7 · top_p 0.9 · top_k 5 (model defaults)"
    assert want in status


def test_a_model_without_the_file_stays_greedy(engine, tiny_dir):
    r = engine.submit(Request("The quick", model=tiny_dir, chat=False, max_tokens=4)).result()
    assert r.stats.sampling["temperature"] == 0.0 and r.stats.sampling["from_model"] == []
    assert "greedy (no generation_config.json sampling)" in engine.info().format()
