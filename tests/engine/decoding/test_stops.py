from mlx_notebook.engine.decoding.stops import StopMatcher


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


def test_matching_is_independent_of_how_text_is_split():
    stops = ["abcd", "c", "xyz"]
    whole = run(stops, ["zzabcd"])
    pieces = run(stops, ["zz", "a", "b", "cd"])
    assert whole == (["zzab"], "c") and "".join(pieces[0]) == "zzab" and pieces[1] == "c"


def test_longest_stop_ending_at_the_same_place_is_reported():
    assert run(["cd", "abcd"], ["xxabcdyy"]) == (["xx"], "abcd")


def test_cost_per_token_does_not_grow_with_the_number_of_stop_strings():
    # Counted, not timed: failure-link hops of the automaton. Each character adds at
    # most one level of depth and each hop removes one, so hops <= characters fed,
    # whatever the number of stop strings.
    class Counting(list):
        hops = 0

        def __getitem__(self, i):
            Counting.hops += 1
            return super().__getitem__(i)

    pieces = [f" word{i % 97}" for i in range(3000)]
    chars = sum(map(len, pieces))
    for stops in (["NEVER MATCHES"], [f"never{i} matches" for i in range(10_000)],
                  [f"word{i} word" for i in range(97)]):  # fmt: skip
        m = StopMatcher(stops)
        m._ac.fail = Counting(m._ac.fail)
        Counting.hops = 0
        for p in pieces:
            out, hit = m.feed(p)
            if hit:
                break
        assert Counting.hops <= chars, (len(stops), Counting.hops, chars)


def test_holding_back_with_many_overlapping_stops():
    stops = [f"END{i:03d}" for i in range(1000)]
    out, matched = run(stops, ["text E", "N", "D9", "99 after"])
    assert matched == "END999" and "".join(out) == "text "
    assert out[1:] == ["", "", ""]  # "END9" withheld while it could still be a stop
