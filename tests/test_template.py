"""{name} filling: escapes, visibility, unknown names, failing str()."""

import math

import pytest

from mlx_notebook.template import TemplateError, fill, unknown_notice, visible


def test_braces_escape_and_unknown_names_are_reported_once():
    text, unknown = fill('{{x}} {x} {y} {y} {0} {} {"k": 1}', {"x": 5})
    assert text == '{x} 5 {y} {y} {0} {} {"k": 1}'
    assert unknown == ["y"]
    assert "{y} is not defined" in unknown_notice(unknown)


def test_only_the_users_own_variables_are_visible():
    ns = {
        "topic": "rivers",
        "_ih": ["secret history"],
        "_": "last output",
        "In": ["x"],
        "math": math,
        "__builtins__": object(),
    }
    vis = visible(ns, hidden={"In"})
    assert vis == {"topic": "rivers"}
    text, unknown = fill("{topic} {_ih} {In} {math}", vis)
    assert text == "rivers {_ih} {In} {math}"
    assert unknown == ["In", "math"]  # _names never even match


def test_a_variable_whose_str_raises_gives_one_line():
    class Bad:
        def __str__(self):
            raise RuntimeError("no text for you\nsecond line")

    with pytest.raises(TemplateError) as err:
        fill("about {thing}", {"thing": Bad()})
    msg = str(err.value)
    assert "\n" not in msg and "'thing'" in msg and "RuntimeError: no text for you" in msg
