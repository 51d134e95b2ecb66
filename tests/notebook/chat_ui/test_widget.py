"""ChatUI: what each click does to the Chat, and what the widget then shows.

The widget's clicks arrive as comm messages (``handle``); the redraws are driven
by hand (``start_thread=False``, ``refresh``) on an injected clock.
"""

import re

import pytest

from mlx_notebook.chat.conversation import Chat
from mlx_notebook.engine import Token
from mlx_notebook.notebook.chat_ui.widget import ChatUI
from mlx_notebook.testing import ScriptedModel, VirtualClock


@pytest.fixture
def ui(engine, tiny_dir):
    return ChatUI(
        model=tiny_dir, backend=engine, max_tokens=8, start_thread=False, clock=VirtualClock()
    )


def finish(ui, timeout=30):
    ui.chat.last.job.wait(timeout)
    assert ui.refresh() is True


def roles(html):
    return re.findall(r'<div class="turn (\w+)(?: live)?"', html)


@pytest.fixture
def dreamer(engine, think_tok):
    """Thinks " flow flow ..." until told to stop, then says " Paris"; one token per 5 ms."""
    ids = lambda t: think_tok.encode(t, add_special_tokens=False)  # noqa: E731
    start, end = (think_tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>"))
    eos = think_tok.convert_tokens_to_ids("<|im_end|>")
    flow, paris = ids(" flow"), ids(" Paris")
    following = {start: flow[0], **dict(zip(flow, flow[1:])), flow[-1]: flow[0]}
    following.update(zip([end, *paris], [*paris, eos]))
    model = ScriptedModel(
        len(think_tok.get_vocab()), lambda pos, tok: following.get(tok, eos), delay_s=0.005
    )
    engine.call(lambda: engine.registry.register("dreamer", model, think_tok)).result()
    return "dreamer"


def test_send_shows_the_message_streams_the_reply_then_settles_it(ui):
    ui.handle("send", {"text": "Hello **there**"})
    assert (
        ui.busy and roles(ui.transcript) == ["user"] and "<strong>there</strong>" in ui.transcript
    )
    assert roles(ui.live) == ["assistant"] and "live" in ui.live
    finish(ui)
    assert not ui.busy and ui.live == "" and not ui.thinking and ui.status == ""
    assert roles(ui.transcript) == ["user", "assistant"]
    reply = ui.chat.messages[-1]
    assert reply["role"] == "assistant"
    figures = re.search(r'<div class="stats">([^<]*)</div>', ui.transcript).group(1)
    assert "TTFT" in figures and "prompt tokens" in figures
    assert ui.chat.messages == [{"role": "user", "content": "Hello **there**"}, reply]


def test_the_live_reply_shows_tokens_and_rate_on_the_widget_clock(engine, dreamer):
    clock = VirtualClock()
    ui = ChatUI(model=dreamer, backend=engine, max_tokens=2000, start_thread=False, clock=clock)
    ui.handle("send", {"text": "Where do rivers go?"})
    for ev in ui.chat.last.job.events(detach=True):
        if isinstance(ev, Token) and ev.index == 0:
            ui.refresh()  # the widget sees the first token
        if isinstance(ev, Token) and ev.index == 10:
            break
    clock.sleep(1.0)  # ten more tokens in a second, on the widget's clock
    ui.refresh()
    assert "generating · 11 tokens · 10.0 tok/s" in ui.live  # the widget's own count
    assert ui.thinking and '<details class="think" open><summary>thinking…' in ui.live
    ui.handle("stop_thinking")
    ui.chat.last.wait(30)
    ui.refresh()
    assert not ui.thinking and not ui.busy
    reply = ui.chat.messages[-1]
    assert reply["content"] == " Paris" and reply["reasoning_content"].startswith("flow flow")
    assert '<details class="think"><summary>thinking (' in ui.transcript  # folded


def test_stop_keeps_the_partial_reply_marked_and_the_input_comes_back(engine, dreamer):
    ui = ChatUI(model=dreamer, backend=engine, max_tokens=2000, start_thread=False)
    ui.handle("send", {"text": "Where do rivers go?"})
    for ev in ui.chat.last.job.events(detach=True):
        if isinstance(ev, Token) and ev.index == 4:
            break
    ui.handle("stop")
    ui.refresh()
    assert "stopping…" in ui.live or not ui.busy
    finish(ui)
    assert ui.chat.messages[-1]["stopped"] is True
    assert 'assistant<span class="lbl"> · stopped</span>' in ui.transcript and not ui.busy


def test_regenerate_edit_delete_and_new_chat(ui):
    for text in ("One", "Two"):
        ui.handle("send", {"text": text})
        finish(ui)
    ui.handle("regenerate", {"index": 3})
    finish(ui)
    assert len(ui.chat.messages) == 4 and len(ui.chat.branches) == 1
    ui.handle("edit", {"index": 0, "text": "Uno"})
    assert roles(ui.transcript) == ["user"] and "Uno" in ui.transcript
    finish(ui)
    assert [m["content"] for m in ui.chat.messages][0] == "Uno"
    ui.handle("send", {"text": "Dos"})
    finish(ui)
    ui.handle("delete", {"index": 1})  # the first reply: its whole exchange goes
    assert [m["content"] for m in ui.chat.messages if m["role"] == "user"] == ["Dos"]
    assert roles(ui.transcript) == ["user", "assistant"]
    ui.handle("new")
    assert ui.chat.messages == [] and roles(ui.transcript) == []


def test_an_edit_reuses_the_cache_up_to_the_edit(engine, tiny_dir):
    ui = ChatUI(model=tiny_dir, backend=engine, system="Be terse.", max_tokens=6,
                start_thread=False)  # fmt: skip
    for text in ("One", "Two"):
        ui.handle("send", {"text": text})
        finish(ui)
    ui.handle("edit", {"index": 3, "text": "Zwei"})
    finish(ui)
    stats = ui.chat.last.stats
    # The system prompt, the first exchange and the template's opening of the edited
    # message came from the cache: only the edit and what follows were computed.
    assert stats.cached_tokens > stats.prompt_tokens / 2
    assert f"{stats.cached_tokens} of {stats.prompt_tokens} prompt tokens cached" in ui.transcript


def test_refusals_land_in_the_status_line_and_give_the_text_back(engine, dreamer, monkeypatch):
    ui = ChatUI(model=dreamer, backend=engine, max_tokens=100000, start_thread=False)
    sent = []
    monkeypatch.setattr(ui, "send", sent.append)
    ui.handle("send", {"text": "One"})  # thinks until stopped
    ui._on_msg(ui, {"type": "send", "text": "Two"}, [])
    restored = [m for m in sent if m["type"] == "restore"]  # (the rest: the live reply)
    assert "still generating" in ui.status and restored == [{"type": "restore", "text": "Two"}]
    ui._on_msg(ui, {"type": "stop"}, [])
    assert ui.status == ""  # the next action clears it
    finish(ui)
    for bad, says in [
        ({"type": "edit", "index": 1, "text": "x"}, "not a user message"),
        ({"type": "delete", "index": "1"}, "expected an integer"),
        ({"type": "launch"}, "unknown action 'launch'"),
        ({"type": "send", "text": "  "}, "must not be empty"),
    ]:
        ui._on_msg(ui, bad, [])
        assert says in ui.status, (bad, ui.status)
    assert len(ui.chat.messages) == 2


def test_settings_are_the_chats_defaults_and_system_prompt(ui):
    ui.temperature, ui.top_p, ui.max_tokens = 0.7, 0.9, 16
    assert ui.chat.defaults == {"max_tokens": 16, "temperature": 0.7, "top_p": 0.9}
    ui.temperature = None
    assert "temperature" not in ui.chat.defaults
    ui.system = "Be kind."
    assert ui.chat.messages[0] == {"role": "system", "content": "Be kind."}
    assert roles(ui.transcript) == ["system"]
    ui.system = ""
    assert ui.chat.messages == []


def test_code_and_the_widget_share_one_conversation(engine, tiny_dir):
    chat = Chat(tiny_dir, backend=engine, max_tokens=5)
    chat.ask("From code")
    ui = ChatUI(chat, start_thread=False, name="notes")
    assert roles(ui.transcript) == ["user", "assistant"] and ui.title == f"notes · {tiny_dir}"
    turn = chat.send("Also from code")  # as %%chat does: the widget follows it
    assert ui.busy
    turn.wait(30)
    ui.refresh()
    assert roles(ui.transcript) == ["user", "assistant"] * 2 and not ui.busy
    ui.close()
    chat.ask("After closing")  # the conversation goes on without the widget
    assert len(chat.messages) == 6


def test_the_saved_transcript_has_the_bubbles_and_nothing_to_click(ui):
    ui.handle("send", {"text": "Hi <script>alert(1)</script>"})
    finish(ui)
    saved = ui._saved_html()
    assert "saved transcript" in saved and roles(saved) == ["user", "assistant"]
    assert "<button" not in saved and "<script>alert" not in saved
    assert "prompt tokens" in saved
    assert ui._plain().startswith("chat · ") and "[user]\nHi <script>" in ui._plain()


def test_options_are_checked(engine, tiny_dir):
    with pytest.raises(ValueError, match="unknown option"):
        ChatUI(model=tiny_dir, bogus=1)
    with pytest.raises(ValueError, match="give them to the Chat"):
        ChatUI(Chat(tiny_dir), model="other")


def test_a_failed_reply_is_taken_back_and_its_text_returned(engine, tmp_path, monkeypatch):
    ui = ChatUI(model=str(tmp_path), backend=engine, start_thread=False)  # no model there
    sent = []
    monkeypatch.setattr(ui, "send", sent.append)
    ui.handle("send", {"text": "Hello"})
    finish(ui)
    assert ui.status.startswith("error: ") and "config.json" in ui.status
    assert ui.chat.messages == [] and roles(ui.transcript) == [] and not ui.busy
    restored = [m for m in sent if m["type"] == "restore"]
    assert restored == [{"type": "restore", "text": "Hello"}]  # back in the input box


def test_an_unexpected_failure_is_said_in_the_widget_and_logged(ui, monkeypatch, caplog):
    def broken(text):
        raise RuntimeError("the engine is closed")

    monkeypatch.setattr(ui.chat, "send", broken)
    monkeypatch.setattr(ui, "send", lambda content: None)
    ui._on_msg(ui, {"type": "send", "text": "Hi"}, [])
    assert ui.status == "the engine is closed" and "ChatUI: 'send' failed" in caplog.text


def test_reply_figures_speak_of_the_cache_only_when_it_served_tokens():
    from mlx_notebook.engine.events import Finished, Stats
    from mlx_notebook.notebook.chat_ui.widget import reply_figures

    first = Finished("hi", "stop", stats=Stats(prompt_tokens=30, generation_tokens=3, ttft_s=0.1))
    assert "30 prompt tokens" in reply_figures(first) and "cached" not in reply_figures(first)
    later = Finished("hi", "length", stats=Stats(prompt_tokens=40, cached_tokens=29))
    assert "29 of 40 prompt tokens cached" in reply_figures(later)
    assert reply_figures(later).endswith("max tokens")


def test_the_live_reply_goes_as_deltas_the_browser_can_replay(engine, dreamer, monkeypatch):
    from mlx_notebook.notebook.live.delta import apply

    ui = ChatUI(model=dreamer, backend=engine, max_tokens=2000, start_thread=False)
    sent = []
    monkeypatch.setattr(ui, "send", sent.append)
    ui.handle("send", {"text": "Where do rivers go?"})
    copies = []
    for ev in ui.chat.last.job.events(detach=True):
        if isinstance(ev, Token):
            ui.refresh()
            copies.append(ui.live)
        if isinstance(ev, Token) and ev.index == 60:
            break
    ui.handle("stop")
    finish(ui)
    live = [m for m in sent if m["type"] == "live"]
    assert [m["seq"] for m in live] == list(range(1, len(live) + 1))
    blocks, seen = [], []
    for m in live:
        blocks = m["blocks"] if m["kind"] == "full" else apply(blocks, m["ops"], m["count"])
        seen.append("".join(blocks))
    assert seen[-1] == "" == ui.live  # settled: no live bubble left
    assert set(copies) <= set(seen)  # every state the widget had, the browser rebuilt
    deltas = [sum(len(put) for *_, put in m["ops"]) for m in live if m["kind"] == "delta"]
    assert max(deltas[:-1]) < 200 < len(max(seen, key=len))  # a token or so, never the bubble
