"""A batched step's next tokens (`engine.batch_sampling`): the sampled rows are drawn
together, one normalizer and one draw call per step, and each row's text is the text it
generates alone, seeded or greedy, with its own repetition penalty."""

import mlx.core as mx
import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import ext as _ext
from mlx_notebook.engine import Request
from mlx_notebook.engine.decoding import sampling


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
    real = sampling._native
    monkeypatch.setattr(sampling, "_native", lambda x: spy if real(x) is not None else None)
    together = _run(engine, tiny_dir, repetition_penalty=1.3)
    assert max(r.stats.batch_rows for r in together) == 4  # they did run as one batch
    assert 3 in spy.draws  # a step drew its three sampled rows in one call
    assert spy.draws.count(1) < len(spy.draws)
    monkeypatch.setattr(sampling, "_native", real)
    alone = _run(engine, tiny_dir, repetition_penalty=1.3, batch=False)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert all(len(r.token_ids) == 12 for r in together)


def test_without_the_kernels_rows_go_one_by_one_to_the_same_text(
    ext, engine, tiny_dir, monkeypatch
):
    on = [r.token_ids for r in _run(engine, tiny_dir)]
    monkeypatch.setenv(sampling.ENV, "0")
    before = ext.sample_calls(2)
    off = [r.token_ids for r in _run(engine, tiny_dir)]
    assert ext.sample_calls(2) == before  # MLX's own draws, row after row
    assert on == off
    mx.random.seed(0)  # leave the global sequence as other tests expect it


def test_rows_penalized_together_get_their_own_processors_scores():
    """Rows whose only processor is mlx-lm's repetition penalty: one gather, select and
    scatter for each group of equal settings, each row's scores bit for bit its own
    processor's (contexts shorter and longer than the penalty's, repeated tokens); a
    row alone in its group, or with other processors, is left to itself."""
    from types import SimpleNamespace

    import numpy as np

    from mlx_notebook.engine.decoding.output import repetition_processors
    from mlx_notebook.engine.local.batch_sampling import _penalties_together

    def row(penalty, context, extra=False):
        procs = repetition_processors(penalty)
        if extra:
            procs = [*procs, lambda _tokens, lg: lg]
        ctx = mx.array(context, dtype=mx.uint32)
        return SimpleNamespace(setup=SimpleNamespace(processors=procs), context=ctx)

    contexts = [list(range(30)), [5, 5, 9], [7] * 25, list(range(100, 140, 3)), [1, 2], [3]]
    rows = [row(1.3, contexts[0]), row(1.3, contexts[1]), row(1.3, contexts[2])]
    rows += [row(0.8, contexts[3]), row(0.8, contexts[4]), row(1.3, contexts[5], extra=True)]
    rows.append(row(2.0, [4, 4]))  # alone with its settings
    logits = mx.random.normal((len(rows), 512), key=mx.random.key(3)) * 4
    cur = mx.array([11, 5, 7, 100, 2, 3, 4], dtype=mx.uint32)
    got = _penalties_together(rows, cur, logits)
    assert sorted(got) == [0, 1, 2, 3, 4]
    for i in got:
        ctx = mx.concatenate([mx.array(contexts[i], dtype=mx.uint32), cur[i : i + 1]])
        assert rows[i].context.tolist() == ctx.tolist()  # advanced, as alone
        want = rows[i].setup.processors[0](ctx, logits[i : i + 1] + 0)
        assert np.array_equal(np.array(got[i]), np.array(want)), i
    assert rows[5].context.size == len(contexts[5]) and rows[6].context.size == 2
