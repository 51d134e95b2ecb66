"""A batched step's next tokens (`engine.batch_sampling`): the sampled rows are drawn
together, one normalizer and one draw call per step, and each row's text is the text it
generates alone, seeded or greedy, with its own repetition penalty."""

import mlx.core as mx
import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook import _ext
from mlx_notebook.engine import Request
from mlx_notebook.models import cpu_sampling


@pytest.fixture(scope="module")
def ext():
    mod = _ext.load()
    assert mod is not None, _ext.status()
    return mod


class _Spy:
    """The extension, counting the rows of each draw call (the calls go through)."""

    def __init__(self, mod):
        self.mod, self.draws = mod, []

    def categorical_rows(self, x, u, inv_temp):
        self.draws.append(x.shape[0])
        return self.mod.categorical_rows(x, u, inv_temp)

    def __getattr__(self, name):
        return getattr(self.mod, name)


PROMPTS = [("The quick", 3), ("Hi", 4), ("Once upon", 5)]


def _run(engine, tiny_dir, **kw):
    kw = dict(model=tiny_dir, chat=False, max_tokens=12, temperature=0.8, top_p=0.9, **kw)
    jobs = [engine.submit(Request(p, seed=s, **kw)) for p, s in PROMPTS]
    jobs.append(engine.submit(Request("Greedy", **{**kw, "temperature": 0})))
    return [j.result(timeout=120) for j in jobs]


def test_sampled_rows_are_drawn_together_and_draw_their_solo_tokens(
    ext, engine, tiny_dir, monkeypatch
):
    spy = _Spy(ext)
    real = cpu_sampling._native
    monkeypatch.setattr(cpu_sampling, "_native", lambda x: spy if real(x) is not None else None)
    together = _run(engine, tiny_dir, repetition_penalty=1.3)
    assert max(r.stats.batch_rows for r in together) == 4  # they did run as one batch
    assert 3 in spy.draws  # a step drew its three sampled rows in one call
    assert spy.draws.count(1) < len(spy.draws)
    monkeypatch.setattr(cpu_sampling, "_native", real)
    alone = _run(engine, tiny_dir, repetition_penalty=1.3, batch=False)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert all(len(r.token_ids) == 12 for r in together)


def test_without_the_kernels_rows_go_one_by_one_to_the_same_text(
    ext, engine, tiny_dir, monkeypatch
):
    on = [r.token_ids for r in _run(engine, tiny_dir)]
    monkeypatch.setenv(cpu_sampling.ENV, "0")
    before = ext.sample_calls(2)
    off = [r.token_ids for r in _run(engine, tiny_dir)]
    assert ext.sample_calls(2) == before  # MLX's own draws, row after row
    assert on == off
    mx.random.seed(0)  # leave the global sequence as other tests expect it
