"""EvalResult on scripted cells: frames, the wide table, summary and disagreements."""

import pytest

from mlx_notebook.engine.events import Stats
from mlx_notebook.evaluation.plan import Cell, Column, Plan
from mlx_notebook.evaluation.result import EvalResult
from mlx_notebook.evaluation.scorers import exact


def result():
    cols = [Column("m", "a", "{q}", "a"), Column("m", "b", "{q}", "b")]
    rows = [{"q": str(i)} for i in range(4)]
    cells = []
    for ci in range(2):
        for e in range(2):
            for r in range(4):
                st = Stats(generation_tokens=4, total_s=1.0, ended_at=10.0 + r)
                score = float(r % 2) if ci == 0 else 1.0
                cells.append(Cell(r, ci, e, str(r), None, f"t{ci}{r}", "stop", None, score, {}, st))
    plan = Plan(rows, ["q"], cols, cells, {}, exact("q"), {}, 2)
    return EvalResult(plan, cells, 4.0, None)


def test_summary_frames_and_disagreements():
    pytest.importorskip("pandas")
    res = result()
    s = res.summary()
    assert [c.score.mean for c in s.columns] == [0.5, 1.0]
    assert s.columns[0].tokens == 32 and s.columns[0].tps == pytest.approx(32 / 4)
    (p,) = s.pairs
    assert (p.better, p.worse, p.same) == (2, 0, 2)
    assert "b − a = +0.500" in str(s)
    long = res.to_frame()
    assert len(long) == 16 and set(long["prompt"]) == {"a", "b"}
    wide = res.table()
    assert list(wide.columns) == ["row", "a: text", "a: score", "b: text", "b: score"]
    assert list(wide["a: score"]) == [0.0, 1.0, 0.0, 1.0]
    d = res.disagreements()
    assert [x["row"] for x in d] == [0, 2] and d[0]["a: text"] == "t00"
