"""Chat: history, Stop and undo, files, refusals, and a cache that makes each turn cheap."""

import json

import pytest

from mlx_notebook.chat.conversation import Chat, ChatBusy
from mlx_notebook.engine import Request, Token
from mlx_notebook.engine.errors import GenerationError


@pytest.fixture
def chat(engine, tiny_dir):
    return Chat(tiny_dir, "You are terse.", backend=engine, max_tokens=12)


def test_turns_build_the_history(chat):
    a = chat.ask("Hello")
    b = chat.ask("And then?")
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant"] * 1 + [
        "user", "assistant"]  # fmt: skip
    assert chat.messages[2]["content"] == a and chat.messages[4]["content"] == b
    assert "[assistant]" in chat.transcript() and "And then?" in chat.transcript()


def test_each_turn_sends_the_whole_conversation(chat):
    chat.ask("Hello")
    req = chat.request("Next")
    assert req.prompt[0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in req.prompt] == ["system", "user", "assistant", "user"]
    assert req.chat and req.max_tokens == 12


def test_a_stopped_reply_is_kept_marked_and_the_next_turn_continues(engine, endless):
    c = Chat(endless, backend=engine, max_tokens=2000)
    turn = c.send("Hello")
    for ev in turn.job.events(detach=True):
        if isinstance(ev, Token) and ev.index == 5:
            turn.cancel()
            break
    turn.wait(30)
    assert turn.finish_reason == "cancelled"
    assert c.messages[-1] == {"role": "assistant", "content": turn.text, "stopped": True}
    c.ask("Go on", max_tokens=3)
    assert [m["role"] for m in c.messages] == ["user", "assistant", "user", "assistant"]
    assert "(stopped)" in c.transcript()


def test_undo_reset_fork(chat):
    chat.ask("One")
    chat.ask("Two")
    fork = chat.fork()
    removed = chat.undo()
    assert [m["content"] for m in removed][0] == "Two" and len(chat.messages) == 3
    assert len(fork.messages) == 5  # the fork is independent
    chat.reset()
    assert chat.messages == [{"role": "system", "content": "You are terse."}]
    assert chat.undo() == []


def test_busy_empty_and_unknown_options_start_nothing(engine, endless):
    c = Chat(endless, backend=engine, max_tokens=2000)
    turn = c.send("Hello")
    with pytest.raises(ChatBusy):
        c.send("again")
    turn.cancel()
    turn.wait(30)
    with pytest.raises(ValueError, match="empty"):
        c.send("   ")
    with pytest.raises(ValueError, match="unknown request field"):
        c.send("hi", bogus=1)
    with pytest.raises(ValueError, match="unknown request field"):
        Chat(endless, bogus=1)


def test_an_error_takes_the_exchange_back(engine, tmp_path):
    c = Chat(str(tmp_path), backend=engine)  # a directory, but no model in it
    with pytest.raises(GenerationError, match="config.json"):
        c.ask("Hello")
    assert c.messages == []
    with pytest.raises(ValueError, match="no such file"):  # refused before anything is sent
        Chat("/no/such/model", backend=engine).send("Hello")


def test_a_model_without_a_chat_template_is_refused_with_advice(engine, tmp_path):
    from mlx_notebook.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "plain")
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    c = Chat(str(path), backend=engine)
    with pytest.raises(ValueError, match="no chat template.*--raw"):
        c.send("Hello")
    assert engine.info().queued == 0 and not engine.info().batched and c.messages == []


def test_save_and_load_round_trip(chat, tmp_path):
    chat.ask("Hello")
    f = tmp_path / "c.json"
    chat.save(f)
    data = json.loads(f.read_text())
    assert [m["role"] for m in data] == ["system", "user", "assistant"]
    back = Chat.load(f, model=chat.model, backend=chat.backend)
    assert back.messages == chat.messages
    (tmp_path / "bad.json").write_text('{"role": "user"}')
    with pytest.raises(ValueError, match="expected a JSON list"):
        Chat.load(tmp_path / "bad.json")
    (tmp_path / "bad2.json").write_text('[{"role": "robot", "content": "x"}]')
    with pytest.raises(ValueError, match="message 0 needs a role"):
        Chat.load(tmp_path / "bad2.json")
    with pytest.raises(ValueError, match="cannot read"):
        Chat.load(tmp_path / "missing.json")


def test_editing_messages_reuses_the_unchanged_prefix(chat):
    chat.ask("Hello there")
    chat.ask("Tell me more")
    chat.messages[3]["content"] = "Tell me less"  # an edit near the end
    turn = chat.send("ok")
    turn.wait(30)
    s = turn.stats
    assert 0 < s.cached_tokens < s.prompt_tokens


@pytest.mark.parametrize("after", ["plain", "stop", "undo"])
def test_a_cached_turn_equals_the_same_turn_from_scratch(engine, tiny_dir, after):
    c = Chat(tiny_dir, "Be brief.", backend=engine, max_tokens=20)
    c.ask("Hello world")
    if after == "stop":
        t = c.send("The quick brown fox", max_tokens=500)
        for ev in t.job.events(detach=True):
            if isinstance(ev, Token) and ev.index == 7:
                t.cancel()
                break
        t.wait(30)
    elif after == "undo":
        c.ask("The quick brown fox")
        c.undo()
    turn = c.send("Rivers flow to the sea")
    turn.wait(30)
    assert turn.stats.cached_tokens > 0  # the conversation's cache was used
    fresh = engine.submit(
        Request(turn.job.request.prompt, model=tiny_dir, max_tokens=20, reuse_cache=False)
    ).result(timeout=30)
    assert turn.job.result().token_ids == fresh.token_ids


# -- on the bundled default model (issue 14's acceptance) --------------------------------

QUESTIONS = [
    "Name a river in Europe.", "Where does it flow?", "Name a mountain there.",
    "How high is it?", "Name a city nearby.", "What is it known for?",
    "Name a food from there.", "How is it made?", "Name a festival there.",
    "When does it happen?",
]  # fmt: skip


def turn_figures(turn):
    s = turn.stats
    return s.prompt_tokens, s.cached_tokens, s.generation_tokens, s.ttft_s


def check_reuse(figures, slack=8):
    for (p0, _, g0, _), (_, c1, _, _) in zip(figures, figures[1:]):
        assert c1 >= p0 + g0 - slack, (p0, g0, c1)


@pytest.mark.slow
def test_ten_turns_each_prefill_only_what_is_new(default_engine):
    # Greedy: a sampled reply may re-encode to other ids, which ends reuse a little early.
    c = Chat(backend=default_engine, max_tokens=24, temperature=0)
    figs = [turn_figures(c.send(q).wait()) for q in QUESTIONS]
    check_reuse(figs)
    p9, _, g9, _ = figs[8]
    p10, c10, _, _ = figs[9]
    new = p10 - (p9 + g9)  # the last user message and its template
    assert p10 - c10 <= new + 16, figs[9]
    # Counted, not timed (TTFT is in benchmarks/bench_chat.py): the tenth turn
    # computes no more prompt tokens than the second, though its prompt is far longer.
    p2, c2, _, _ = figs[1]
    assert p10 - c10 <= (p2 - c2) + 16, (figs[1], figs[9])
    assert p10 > 4 * figs[1][0]  # the conversation grew many times longer


@pytest.mark.slow
def test_two_conversations_and_a_generate_between_keep_their_caches(default_engine):
    # Greedy: a sampled reply may re-encode to other ids, which ends reuse a little early.
    a = Chat(backend=default_engine, max_tokens=16, temperature=0)
    b = Chat(backend=default_engine, system="You answer in French.", max_tokens=16, temperature=0)
    fa, fb = [], []
    for q in QUESTIONS[:4]:
        fa.append(turn_figures(a.send(q).wait()))
        fb.append(turn_figures(b.send(q).wait()))
        default_engine.submit(Request("Write one word.", max_tokens=4)).result(timeout=120)
    check_reuse(fa)
    check_reuse(fb)
    assert len(default_engine.scheduler.states["default"].cache) >= 3


@pytest.mark.kernel
def test_chat_cells_in_a_real_kernel(tiny_dir, tmp_path):
    from tests.kernel_harness import ENDLESS, Harness

    k = Harness()
    try:
        assert k.execute("%load_ext mlx_notebook")["status"] == "ok"
        # A model that cannot end its reply before Stop is clicked (the tiny one can).
        assert k.execute(ENDLESS.format(tiny=tiny_dir))["status"] == "ok"

        def cell(body, line=""):
            before = set(k.state)
            mid = k.execute(f"%%chat -m endless -n 3000 {line}\n{body}", wait=False)
            assert k.reply(mid, 30)["status"] == "ok"
            return mid, before

        def view(before):
            return k.new_view(before)

        m1, b1 = cell("Hello there", "-n 8")
        k.wait_for("turn 1 done", lambda: k.final_output(m1), 30)
        m2, b2 = cell("Tell me a long story")
        html, button = view(b2)
        k.wait_for("turn 2 streams", lambda: "generating" in (k.value(html, "value") or ""))
        assert "chat, turn 2" in k.value(html, "value") and "chat chat" not in k.value(
            html, "value"
        )
        k.click(button)
        doc = k.wait_for("turn 2 stopped", lambda: k.final_output(m2), 30)
        assert "stopped" in doc["text/html"]
        _, out = k.output("%chat history", 10)
        assert "[assistant (stopped)]" in out and "Tell me a long story" in out
        m3, _ = cell("Go on", "-n 6 -o third")
        k.wait_for("turn 3 done", lambda: k.final_output(m3), 30)
        _, out = k.output("print(third.finish_reason, third.stats.cached_tokens > 0)", 10)
        assert "length True" in out  # it continued from the cached conversation
        f = tmp_path / "conv.json"
        _, out = k.output(f"%chat save chat {f}\n%chat load copy {f}\n%chat list", 10)
        assert "saved 6 message(s)" in out and "loaded 6 message(s)" in out
        assert "copy: 3 turn(s)" in out
        reply, out = k.output("%chat history nosuch", 10)
        assert "no conversation named 'nosuch'" in out and "Traceback" not in out
        reply, out = k.output("%%chat\n   ", 10)
        assert "the message is empty" in out
        (tmp_path / "bad.json").write_text("not json")
        _, out = k.output(f"%chat load bad {tmp_path / 'bad.json'}", 10)
        assert "is not JSON" in out
    finally:
        k.close()


@pytest.mark.kernel
@pytest.mark.slow
def test_a_question_to_the_default_model_at_default_settings_ends_on_its_own():
    # Issue 23: greedy decoding of the bundled model looped to the token limit; its
    # authors' sampling and a mild repetition guard make it stop by itself.
    from tests.kernel_harness import Harness

    k = Harness()
    try:
        assert k.execute("%load_ext mlx_notebook")["status"] == "ok"
        # Seeded, so the test is repeatable; test_default_model tries many seeds.
        code = "%%chat --wait --seed 3 -o a\nWhat is the capital of France?"
        assert k.execute(code, timeout=300)["status"] == "ok"
        _, out = k.output("print(a.finish_reason, a.stats.generation_tokens, repr(a.text))", 30)
        reason, n, _text = out.strip().split(" ", 2)
        assert reason == "stop" and int(n) < 256, out
        _, out = k.output("print(a.stats.sampling['temperature'], a.stats.sampling['top_p'])")
        assert out.split() == ["0.2", "0.9"]
        _, out = k.output("%mlx help", 30)
        assert "temperature 0.2 · top_p 0.9 · repetition_penalty 1.1 (model defaults)" in out
    finally:
        k.close()


def test_ask_with_a_schema(engine, tiny_dir):
    c = Chat(model=tiny_dir, backend=engine, max_tokens=20, temperature=0)
    assert c.ask("Happy?", schema=["yes", "no"]) in ("yes", "no")
    assert c.messages[-1]["content"] in ("yes", "no")  # the reply joins the conversation
    turn = c.send("A number?", schema=int, max_tokens=8)
    text = turn.wait().text
    assert text.lstrip("-").isdigit() or turn.wait().finish_reason == "length"


def test_regenerate_replaces_the_last_reply_and_keeps_the_old_branch(chat):
    chat.ask("One")
    first = chat.ask("Two")
    before = [dict(m) for m in chat.messages]
    seen = []
    chat.add_listener(lambda what, turn: seen.append(what))
    turn = chat.regenerate()
    assert seen == ["send"]
    turn.wait(30)
    assert seen == ["send", "settle"]
    assert [m["content"] for m in chat.messages[:4]] == [m["content"] for m in before[:4]]
    assert len(chat.messages) == 5 and chat.messages[-1]["content"] == first  # greedy
    assert chat.branches == [before]
    stats = turn.stats
    assert stats.cached_tokens > 0 and stats.cached_tokens <= stats.prompt_tokens


def test_edit_branches_from_a_user_message_and_reuses_the_cache_before_it(chat):
    chat.ask("One")
    chat.ask("Two")
    before = [dict(m) for m in chat.messages]
    turn = chat.edit(1, "Uno").wait(30)
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant"]
    assert chat.messages[1]["content"] == "Uno" and chat.branches[-1] == before
    # The system prompt before the edited message came from the prompt cache.
    assert 0 < turn.stats.cached_tokens < turn.stats.prompt_tokens
    with pytest.raises(ValueError, match="not a user message"):
        chat.edit(2, "no")
    with pytest.raises(ValueError, match="not a user message"):
        chat.edit(9, "no")
    assert len(chat.branches) == 1  # refusals keep everything


def test_a_refused_edit_or_regenerate_changes_nothing(chat):
    chat.ask("One")
    before = [dict(m) for m in chat.messages]
    with pytest.raises(ValueError, match="empty"):
        chat.edit(1, "  ")
    with pytest.raises(ValueError, match="unknown request field"):
        chat.regenerate(bogus=1)
    assert chat.messages == before and chat.branches == []
    with pytest.raises(ValueError, match="no message yet"):
        Chat("x", backend=chat.backend).regenerate()


def test_delete_removes_a_whole_exchange(chat):
    chat.ask("One")
    chat.ask("Two")
    chat.ask("Three")
    removed = chat.delete(4)  # the reply to "Two"
    assert [m["content"] for m in removed][0] == "Two"
    assert [m["content"] for m in chat.messages if m["role"] == "user"] == ["One", "Three"]
    chat.delete(1)  # a user message takes its reply along
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant"]
    with pytest.raises(ValueError, match="system prompt"):
        chat.delete(0)
    with pytest.raises(ValueError, match="no message 7"):
        chat.delete(7)


def test_delete_stops_a_running_reply_in_the_exchange(engine, endless):
    c = Chat(endless, backend=engine, max_tokens=2000)
    turn = c.send("Hello")
    c.delete(0)
    assert turn.done and turn.finish_reason == "cancelled" and c.messages == []


def test_system_prompt_set_replaced_removed(chat):
    chat.ask("One")
    chat.set_system("Be kind.")
    assert chat.messages[0] == {"role": "system", "content": "Be kind."}
    assert len(chat.messages) == 3
    chat.set_system("")
    assert [m["role"] for m in chat.messages] == ["user", "assistant"]


def test_a_failing_listener_is_logged_and_the_turn_goes_on(chat, caplog):
    def bad(what, turn):
        raise RuntimeError("view bug")

    chat.add_listener(bad)
    assert chat.ask("One")
    assert "view bug" in caplog.text and len(chat.messages) == 3
    chat.remove_listener(bad)
    chat.remove_listener(bad)  # twice is fine
