"""LiveWidget: numbered deltas, the whole view at 1, 4, 16, ... and on request, clicks."""

import json
import logging

from mlx_notebook.notebook.live.delta import apply
from mlx_notebook.notebook.live.widget import LiveWidget


def _recording(widget):
    sent = []
    widget.send = sent.append
    return sent


def _replay(initial, msgs):
    blocks, seq = list(initial), 0
    for m in msgs:
        if m["kind"] == "full":
            blocks, seq = list(m["blocks"]), m["seq"]
        else:
            assert m["seq"] == seq + 1
            blocks, seq = apply(blocks, m["ops"], m["count"]), m["seq"]
    return blocks


def test_deltas_rebuild_the_view_and_the_whole_view_goes_at_powers_of_four():
    w = LiveWidget(["<style>x</style>", "hdr", ""])
    sent = _recording(w)
    text = ""
    for i in range(300):
        text += f" w{i}"
        assert w.show(["<style>x</style>", f"hdr {i}", f"<p>{text}</p>"])
    assert not w.show(["<style>x</style>", "hdr 299", f"<p>{text}</p>"])  # nothing new
    assert [m["seq"] for m in sent if m["kind"] == "full"] == [1, 4, 16, 64, 256]
    assert _replay(w.initial, sent) == w.blocks and w.value.endswith(f"{text}</p>")
    deltas = sum(len(json.dumps(m["ops"])) for m in sent if m["kind"] == "delta")
    fulls = sum(len(json.dumps(m["blocks"])) for m in sent if m["kind"] == "full")
    assert deltas < len(text) + 300 * 40  # its word, the header's digits, two ops' framing
    assert fulls < 1.4 * len(w.value)  # 1/4 + 1/16 + ... of the end: about a third more


def test_a_copy_that_fell_behind_gets_the_whole_view_next():
    w = LiveWidget(["a"])
    sent = _recording(w)
    w.show(["ab"])
    w.show(["abc"])
    w.click("nothing")  # unknown buttons are ignored
    w._on_msg(w, {"kind": "sync"}, [])
    w.show(["abcd"])
    assert [m["kind"] for m in sent] == ["full", "delta", "full"]
    assert sent[-1]["blocks"] == ["abcd"]


def test_clicks_call_their_handler_and_a_failing_one_is_logged(caplog):
    w = LiveWidget([""])
    calls = []
    w.on_click("stop", lambda: calls.append("stop"))
    w.on_click("think", lambda: 1 / 0)
    w.click("stop")
    with caplog.at_level(logging.ERROR, logger="mlx_notebook"):
        w.click("think")
    assert calls == ["stop"] and "the think button failed" in caplog.text


def test_a_view_takes_no_settings_from_a_click():
    w = LiveWidget(["a"])
    pressed = []
    w.on_click("stop", lambda: pressed.append(w.ended))
    w._on_msg(w, {"event": "click", "button": "stop", "state": {"ended": True}}, [])
    assert pressed == [False] and not w.ended  # no trait tagged click=True: none applied
