from mlx_notebook.engine.decoding.drafts import PromptLookup


def test_lookup_proposes_what_followed_the_latest_earlier_match():
    src = PromptLookup(ngram=2)
    h = [1, 2, 3, 4, 9, 1, 2, 5, 6, 1, 2]
    assert src.propose(h, 3) == [5, 6, 1]  # the later [1, 2] wins
    assert src.propose(h, 1) == [5]


def test_lookup_no_match_proposes_nothing():
    src = PromptLookup(ngram=3)
    assert src.propose([1, 2, 3, 4, 5], 4) == []
    assert src.propose([1, 2], 4) == []


def test_lookup_index_grows_with_history():
    src = PromptLookup(ngram=1)
    h = [7, 8]
    assert src.propose(h, 2) == []
    h += [7]
    assert src.propose(h, 2) == [8, 7]
    h += [3, 7]
    assert src.propose(h, 2) == [3, 7]
