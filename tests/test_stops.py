from mlx_notebook.engine.stops import StopMatcher


def run(stops, pieces):
    m = StopMatcher(stops)
    out, matched = [], None
    for p in pieces:
        text, matched = m.feed(p)
        out.append(text)
        if matched:
            break
    else:
        out.append(m.flush())
    return out, matched


def test_stop_across_three_pieces_is_never_emitted():
    out, matched = run(["STOP"], ["abc S", "T", "O", "Pxyz"])
    assert matched == "STOP"
    assert "".join(out) == "abc "
    assert all("S" not in o for o in out)


def test_stop_at_very_start():
    out, matched = run(["Hel"], ["H", "el", "lo"])
    assert matched == "Hel" and "".join(out) == ""


def test_overlapping_candidates_release_text_once_ruled_out():
    out, matched = run(["quick brown cat", "brown fox"], ["The quick ", "brown ", "fox!"])
    assert matched == "brown fox"
    assert "".join(out) == "The quick "
    # "quick " was held back while "quick brown cat" was still possible
    assert out[0] == "The "


def test_earliest_match_wins_and_ties_go_to_shorter():
    assert run(["ab", "abc"], ["xabc"]) == (["x"], "ab")
    assert run(["bc", "a"], ["zabc"]) == (["z"], "a")


def test_no_match_releases_everything():
    out, matched = run(["zzz"], ["hello z", "z", " world"])
    assert matched is None and "".join(out) == "hello zz world"
    assert out[1] == ""  # "zz" withheld until ruled out


def test_no_stops_passes_through():
    m = StopMatcher([])
    assert m.feed("abc") == ("abc", None)
