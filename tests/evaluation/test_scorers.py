"""Built-in scorers on plain rows and outputs (no model)."""

import pytest

from mlx_notebook.evaluation.scorers import (
    Output,
    as_scorer,
    choice,
    exact,
    includes,
    json_valid,
    judge,
    judge_prompt,
    normalize,
    regex,
    schema,
)


def test_text_scorers():
    row = {"answer": "Paris", "n": 42}
    assert exact()(row, Output(" Paris\n")) is True
    assert exact(ignore_case=True)(row, Output("paris")) and not exact()(row, Output("paris"))
    assert includes()(row, Output("It is PARIS.")) and not includes()(row, Output("Rome"))
    assert regex(r"(\d+)", "n")(row, Output("about 42 of them"))
    assert not regex(r"(\d+)", "n")(row, Output("about 41"))
    assert regex(r"^P")(row, Output("Paris")) and not regex(r"^P")(row, Output("x"))
    with pytest.raises(ValueError, match="does not compile"):
        regex("(")
    assert json_valid()(row, Output('{"a": 1}')) and not json_valid()(row, Output("{a"))
    s = schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    assert s(row, Output('{"a": 1}')) and not s(row, Output('{"a": "x"}'))


def test_choice_picks_by_likelihood_and_by_length():
    row = {"options": ["a", "bbbbbbbb"], "answer": "bbbbbbbb"}
    got = choice()(row, Output("", value=[-2.0, -8.0]))  # -2/1 < -8/8: norm prefers b
    assert got == {"score": 0.0, "acc_norm": 1.0}
    row["answer"] = 0  # an index
    assert choice()(row, Output("", value=[-2.0, -8.0]))["score"] == 1.0


def test_normalize_and_plain_functions():
    assert normalize(True) == (1.0, {}) and normalize(3) == (3.0, {})
    assert normalize({"score": 2, "reason": "ok"}) == (2.0, {"reason": "ok"})
    assert normalize({"f1": 0.5}) == (0.5, {"f1": 0.5}) and normalize(None) == (None, {})
    with pytest.raises(ValueError, match="must return a number"):
        normalize("yes")

    def mine(row, out):
        return len(out.text)

    assert as_scorer(mine).name == "mine" and as_scorer(mine)({}, Output("abc")) == 3


def test_the_judge_asks_with_the_rubric_and_reference():
    j = judge("m", rubric="be right", reference="answer")
    text = judge_prompt(j, {"answer": "4 {x}"}, Output("four", prompt="2+2?"))
    assert "Rubric: be right" in text and "2+2?" in text and "4 {x}" in text and "four" in text
    verdict = {"score": 4, "reason": "fine"}
    assert j({}, Output("", value=verdict)) == {"score": 4.0, "reason": "fine"}
