"""Bad input is one line before anything runs."""

import pytest

from mlx_notebook.engine.backend import Route
from mlx_notebook.evaluation import choice, exact, judge
from mlx_notebook.evaluation.plan import build

ROWS = [{"q": "a?", "answer": "x"}, {"q": "b?", "answer": "y"}]


def test_cells_are_laid_out_by_model_then_variant_then_epoch(engine, route_on, tiny_dir):
    plan = build(ROWS, {"p": "{q}", "r": "Q {q}"}, [tiny_dir], exact(), 3, route_on, seed=4)
    assert len(plan.cells) == 2 * 1 * 2 * 3
    assert [c.label for c in plan.columns] == ["p", "r"]
    assert [plan.request(c).seed for c in plan.cells[:6]] == [4, 4, 5, 5, 6, 6]
    assert plan.cells[2].prompt == "a?" and plan.cells[6].prompt == "Q a?"


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(template="{question}"), r"\{question\} is not a column; the columns are q, answer"),
        (dict(models=["no/such-model-here"]), "no/such-model-here"),
        (dict(score=exact("gold")), "reads the column 'gold'"),
        (dict(score=choice("q")), "row 0's 'q' must be a list of at least two option"),
        (dict(epochs=0), "epochs: must be a whole number >= 1"),
        (dict(models=["m", "m"]), "listed twice"),
        (dict(template={"a": 1}), "must map names to template strings"),
        (dict(score="exact"), "must be a function"),
    ],
)
def test_bad_input_is_one_line_and_nothing_runs(engine, route_on, tiny_dir, kw, match):
    args = dict(data=ROWS, template="{q}", models=[tiny_dir], score=None, epochs=1)
    args.update(kw)
    before = len(engine.scheduler.jobs())
    with pytest.raises(ValueError, match=match) as err:
        build(args["data"], args["template"], args["models"], args["score"], args["epochs"],
              route_on)  # fmt: skip
    assert "\n" not in str(err.value)
    assert len(engine.scheduler.jobs()) == before


def test_choice_on_a_server_is_refused_in_one_line(tiny_dir):
    from mlx_notebook.engine.remote.client import RemoteEngine

    server = RemoteEngine("http://127.0.0.1:9/v1")
    try:
        rows = [{"q": "a", "options": ["x", "y"], "answer": "x"}]
        with pytest.raises(ValueError, match="is a server, which does not send them"):
            build(rows, "{q}", ["m"], choice(), 1, lambda s: Route(server, s))
    finally:
        server.close()


def test_a_judge_and_a_list_of_items(engine, route_on, tiny_dir):
    plan = build(["one", "two"], "Say {item}", [tiny_dir], judge(tiny_dir), 1, route_on)
    assert [c.prompt for c in plan.cells] == ["Say one", "Say two"]
    assert plan.scorer.kind == "judge" and plan.columns[0].label == "tiny0"


def test_an_unknown_judge_model_is_one_line(engine, route_on, tiny_dir):
    with pytest.raises(ValueError, match="^judge: .*no/such-judge"):
        build(ROWS, "{q}", [tiny_dir], judge("no/such-judge"), 1, route_on)
