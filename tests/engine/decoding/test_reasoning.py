"""A thinking model's reasoning comes apart from its answer: events, result, view, chat."""

import pytest

from mlx_notebook.chat.conversation import Chat
from mlx_notebook.engine import Request, Token
from mlx_notebook.engine.decoding.reasoning import ReasoningSplitter
from mlx_notebook.notebook.views.render import ViewState
from mlx_notebook.testing import ScriptedModel


def ids(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_markers_split_across_pieces_are_found_and_dropped(think_tok):
    split = ReasoningSplitter(think_tok, ids(think_tok, "Hello"))  # no open block: answer
    got = [split.feed(t) for t in ["<thi", "nk>Rivers ", "flow</th", "ink>Paris", "!"]]
    answer = "".join(a for a, _ in got) + split.flush()[0]
    thought = "".join(r for _, r in got)
    assert (thought, answer) == ("Rivers flow", "Paris!")
    # A prompt whose template opened the block starts in the reasoning.
    opened = ReasoningSplitter(think_tok, ids(think_tok, "<|im_start|>assistant\n<think>"))
    assert opened.feed("Rivers") == ("", "Rivers")
    closed = ReasoningSplitter(think_tok, ids(think_tok, "<think></think>"))
    assert closed.feed("Paris") == ("Paris", "")


@pytest.fixture
def thinker(engine, think_tok):
    """A model that thinks "Rivers flow", then answers "Paris": each token names the next.

    With thinking switched off the template ends the prompt with ``</think>``, so the
    model answers at once, as a real reasoning model does.
    """
    start, end = (think_tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>"))
    eos = think_tok.convert_tokens_to_ids("<|im_end|>")
    chain = [start, *ids(think_tok, "Rivers flow"), end, *ids(think_tok, " Paris"), eos]
    assert len(set(chain)) == len(chain)
    following = dict(zip(chain, chain[1:]))
    model = ScriptedModel(len(think_tok.get_vocab()), lambda pos, tok: following.get(tok, eos))
    engine.call(lambda: engine.registry.register("thinker", model, think_tok)).result()
    return lambda prompt, **kw: engine.submit(Request(prompt, model="thinker", max_tokens=20, **kw))


def test_a_reply_streams_reasoning_then_answer(thinker):
    job = thinker("Where do rivers go?")
    events = list(job.events(timeout=30))
    tokens = [e for e in events if isinstance(e, Token)]
    fin = events[-1]
    assert fin.reasoning == "Rivers flow" and fin.text == " Paris"
    assert "".join(t.reasoning for t in tokens) == "Rivers flow"
    assert "".join(t.text for t in tokens) == " Paris"
    assert job.result().reasoning == "Rivers flow"
    view = ViewState(model="thinker")
    seen_open = False
    for e in events[:-1]:
        view.apply(e)
        if view.reasoning and not view.text:  # only thinking so far: shown open
            seen_open = True
            assert '<details class="think" open><summary>thinking…</summary>' in view.html()
    assert seen_open
    # The answer has started: the thinking folds away.
    assert '<details class="think"><summary>thinking (2 words)</summary>' in view.html()
    view.apply(fin)
    assert '<details class="think"><summary>' in view.html()
    assert "[thinking]\nRivers flow\n[answer]\n Paris" in view.plain()


def test_no_think_switches_the_template_and_the_reply_has_no_reasoning(thinker, think_tok):
    from mlx_notebook.engine.decoding.prompt import encode_prompt

    on = encode_prompt(Request("Hi", think=True), think_tok)
    off = encode_prompt(Request("Hi", think=False), think_tok)
    assert think_tok.decode(on).endswith("<think>")
    assert think_tok.decode(off).endswith("<think></think>")
    assert encode_prompt(Request("Hi"), think_tok) == on  # the template's own default
    fin = thinker("Hi", think=False).result(timeout=30)
    assert (fin.reasoning, fin.text.strip()) == ("", "Paris")  # a first space is trimmed


def test_chat_keeps_reasoning_apart_and_gives_it_back_to_the_template(engine, thinker, think_tok):
    from mlx_notebook.engine.decoding.prompt import encode_prompt

    chat = Chat("thinker", backend=engine, max_tokens=20)
    assert chat.ask("Where do rivers go?") == " Paris"
    reply = chat.messages[-1]
    assert reply == {"role": "assistant", "content": " Paris", "reasoning_content": "Rivers flow"}
    nxt = chat.request("And then?")
    assert nxt.prompt[-2] == reply
    rendered = think_tok.decode(encode_prompt(nxt, think_tok))
    assert "<|im_start|>assistant\n<think>Rivers flow</think> Paris<|im_end|>" in rendered


def test_a_model_without_markers_has_no_reasoning(engine, tiny_dir):
    r = engine.submit(Request("Hi", model=tiny_dir, max_tokens=5)).result(timeout=30)
    assert r.reasoning == ""


@pytest.fixture
def dreamer(engine, think_tok):
    """A model that thinks " flow flow flow..." forever, and after ``</think>`` says " Paris"."""
    start, end = (think_tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>"))
    eos = think_tok.convert_tokens_to_ids("<|im_end|>")
    flow, paris = ids(think_tok, " flow"), ids(think_tok, " Paris")
    assert not set(flow) & {start, end, eos, *paris}
    following = {start: flow[0], **dict(zip(flow, flow[1:])), flow[-1]: flow[0]}
    following.update(zip([end, *paris], [*paris, eos]))
    model = ScriptedModel(len(think_tok.get_vocab()), lambda pos, tok: following.get(tok, eos))
    engine.call(lambda: engine.registry.register("dreamer", model, think_tok)).result()
    return lambda prompt, **kw: engine.submit(Request(prompt, model="dreamer", max_tokens=80, **kw))


@pytest.mark.parametrize(
    "kw", [dict(batch=False), dict(), dict(draft_kind="lookup")], ids=["alone", "batched", "lookup"]
)
def test_end_thinking_makes_the_answer_start_at_the_next_step(dreamer, kw):
    job = dreamer("Where do rivers go?", **kw)
    asked_at = None
    answer_at = None
    for ev in job.events(timeout=60):
        if not isinstance(ev, Token):
            continue
        if asked_at is None and ev.index >= 6:
            job.end_thinking()  # as the view's "Stop thinking" button does
            # Where the worker was, not this reader: on a busy machine the reader lags
            # the worker by several tokens. Read after asking, so it is not too early.
            asked_at = job.token_count - 1
        if answer_at is None and ev.text:
            answer_at = ev.index
    fin = job.result()
    assert fin.finish_reason == "stop" and fin.text == " Paris"
    assert fin.reasoning.startswith("flow flow") and "Paris" not in fin.reasoning
    # Steps already in flight when it was asked still think: the one being computed (or
    # one verify pass of drafts), and the next one if the worker had already built it
    # (its logits processors ran before the ask: decoding is pipelined one step ahead);
    # then the marker, then the answer. CI saw that second step once under load.
    in_flight = 1 + (job.request.num_draft_tokens if kw.get("draft_kind") else 0)
    assert answer_at - asked_at <= in_flight + 3, (asked_at, answer_at)


def test_end_thinking_changes_nothing_once_answering_or_without_markers(thinker, engine, tiny_dir):
    job = thinker("Where do rivers go?")
    for ev in job.events(timeout=30):
        if isinstance(ev, Token) and ev.text:  # the answer has started
            job.end_thinking()
    fin = job.result()
    assert (fin.reasoning, fin.text) == ("Rivers flow", " Paris")
    plain = engine.submit(Request("Hi", model=tiny_dir, max_tokens=6))
    plain.end_thinking()
    alone = engine.submit(Request("Hi", model=tiny_dir, max_tokens=6)).result(timeout=30)
    assert plain.result(timeout=30).token_ids == alone.token_ids
