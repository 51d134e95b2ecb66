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
    assert eng.info().queued == 0


def test_good_request_and_modes():
    Request("hi", stop="x").validate()
    assert Request("hi").mode == "normal"
    assert Request("hi", draft="lookup").mode == "lookup"
    assert Request("hi", draft="/some/model").mode == "draft"
    Request([{"role": "user", "content": "hi"}]).validate()
    with pytest.raises(ValueError, match="chat"):
        Request([{"role": "user", "content": "hi"}], chat=False).validate()


@pytest.mark.parametrize(
    "field,value,why",
    [
        ("prompt", None, "string or a list"),
        ("prompt", 123, "string or a list"),
        ("prompt", b"bytes", "string or a list"),
        ("prompt", [{"role": "user", "content": 5}], "must be strings"),
        ("stop", 123, "string or a list"),
        ("stop", [None], "non-empty strings"),
        ("seed", -1, r"\[0, 2\*\*64\)"),
        ("seed", 2**64, r"\[0, 2\*\*64\)"),
    ],
)
def test_wrong_types_and_ranges_name_the_field(field, value, why):
    req = Request("hi")
    setattr(req, field, value)
    with pytest.raises(ValueError, match=f"{field}: .*{why}"):
        req.validate()


def test_largest_seed_is_accepted():
    Request("hi", seed=2**64 - 1).validate()


def test_iterator_prompt_survives_validation():
    msgs = iter([{"role": "user", "content": "hi"}])
    req = Request(msgs)
    req.validate()
    req.validate()
    assert req.prompt == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("field", ["prompt", "system", "stop"])
def test_lone_surrogate_is_named_with_its_position(field):
    bad = "ok \ud800 text"
    req = Request("hi")
    setattr(req, field, [bad] if field == "stop" else bad)
    with pytest.raises(ValueError, match=rf"{field}: contains an unpaired surrogate .* index 3"):
        req.validate()


def test_tiny_temperatures_count_as_greedy():
    assert Request("hi", temperature=1e-45).greedy
    assert Request("hi", temperature=0).greedy
    assert not Request("hi", temperature=0.5).greedy


def test_draft_kinds_and_their_shorthands():
    r = Request("hi", draft="suffix")
    r.validate()
    assert (r.kind, r.mode, r.draft) == ("suffix", "suffix", None)
    r = Request("hi", draft="/some/model")
    r.validate()
    assert (r.kind, r.mode) == ("model", "draft")
    r = Request("hi", draft_kind="lookup")
    r.validate()
    assert r.mode == "lookup"
    for bad in (dict(draft_kind="model"), dict(draft_kind="suffix", draft="/m"),
                dict(draft_kind="tree")):  # fmt: skip
        with pytest.raises(ValueError, match="draft"):
            Request("hi", **bad).validate()
