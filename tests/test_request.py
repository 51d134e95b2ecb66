import pytest

from mlx_notebook.engine import Engine, Request


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_tokens", 0),
        ("max_tokens", -3),
        ("prompt", ""),
        ("prompt", "   "),
        ("prompt", []),
        ("temperature", -0.1),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -1),
        ("min_p", 1.0),
        ("repetition_penalty", 0),
        ("seed", 1.5),
        ("stop", [""]),
        ("num_draft_tokens", 0),
        ("num_draft_tokens", 17),
        ("lookup_ngram", 9),
        ("model", ""),
    ],
)
def test_bad_values_raise_naming_the_field_and_nothing_is_queued(field, value):
    eng = Engine(start=False)
    req = Request("hi")
    setattr(req, field, value)
    with pytest.raises(ValueError, match=field):
        eng.submit(req)
    assert eng.info()["queued"] == 0


def test_good_request_and_modes():
    Request("hi", stop="x").validate()
    assert Request("hi").mode == "normal"
    assert Request("hi", draft="lookup").mode == "lookup"
    assert Request("hi", draft="/some/model").mode == "draft"
    Request([{"role": "user", "content": "hi"}]).validate()
    with pytest.raises(ValueError, match="chat"):
        Request([{"role": "user", "content": "hi"}], chat=False).validate()
