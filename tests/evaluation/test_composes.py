"""Evaluate with the rest: the result cache, schemas, speculation and a real server."""

from mlx_notebook.engine import Engine
from mlx_notebook.engine.backend import Route
from mlx_notebook.engine.cache.sequence import forward_passes
from mlx_notebook.engine.remote.client import RemoteEngine
from mlx_notebook.engine.replay.results import Replays
from mlx_notebook.evaluation import EvalRun, exact, includes
from mlx_notebook.evaluation.plan import build
from tests.server_harness import mlx_lm_server

ROWS = [{"q": f"Name {i}.", "answer": "x"} for i in range(6)]


def run(plan):
    return EvalRun(plan).start().wait()


def test_a_rerun_after_adding_a_model_generates_only_that_model(tmp_path, tiny_dir, draft_dir):
    eng = Engine(results=Replays("deterministic", tmp_path / "cache.sqlite"))
    try:
        route = lambda spec: Route(eng, spec)  # noqa: E731
        kw = dict(max_tokens=5, temperature=0)
        first = run(build(ROWS, "{q}", [tiny_dir], includes(), 1, route, **kw))
        before = forward_passes()
        both = run(build(ROWS, "{q}", [tiny_dir, draft_dir], includes(), 1, route, **kw))
        again = [c for c in both.cells if c.column == 0]
        assert [c.text for c in again] == [c.text for c in first.cells]
        assert all(c.stats.replayed is not None for c in again)  # no pass for them
        new = [c for c in both.cells if c.column == 1]
        assert all(c.stats.replayed is None for c in new)
        # Only the new model's passes: its 6 rows' prefill and decode steps, batched.
        assert 0 < forward_passes() - before <= 1 + 5 + 5 + 5
        assert both.to_frame()["replayed"].tolist() == [True] * 6 + [False] * 6
    finally:
        eng.close()


def test_a_schema_and_speculation_keep_their_texts(engine, tiny_dir, draft_dir):
    route = lambda spec: Route(engine, spec)  # noqa: E731
    rows = [{"q": f"Is {i} even?", "answer": "yes" if i % 2 == 0 else "no"} for i in range(6)]
    kw = dict(max_tokens=4, temperature=0, schema=["yes", "no"])
    plain = run(build(rows, "{q}", [tiny_dir], exact(), 1, route, **kw))
    assert {c.text for c in plain.cells} <= {"yes", "no"}  # the schema held in every cell
    spec = run(build(rows, "{q}", [tiny_dir], exact(), 1, route, draft=draft_dir, **kw))
    assert [c.text for c in spec.cells] == [c.text for c in plain.cells]
    assert [c.score for c in spec.cells] == [c.score for c in plain.cells]


def test_a_server_model_is_evaluated_through_its_api(tiny_dir, engine):
    with mlx_lm_server(tiny_dir) as (base, _proc):
        remote = RemoteEngine(base)
        try:
            routes = {"server": Route(remote, "default"), tiny_dir: Route(engine, tiny_dir)}
            plan = build(ROWS[:3], "{q}", ["server", tiny_dir], includes(), 1, routes.__getitem__,
                         max_tokens=5, temperature=0)  # fmt: skip
            res = run(plan)
            assert all(c.finish_reason in ("stop", "length") for c in res.cells)
            # The server runs the same model greedily: the same texts as the local engine.
            assert [c.text for c in res.cells[:3]] == [c.text for c in res.cells[3:]]
            assert len(res.summary().pairs) == 1
        finally:
            remote.close()
