"""RemoteEngine against a real mlx_lm.server (tiny model), and its failures, one line each."""

import pytest

from mlx_notebook.engine import Request, Token
from mlx_notebook.engine.backend import backend_for, remote_spec
from mlx_notebook.engine.remote.client import RemoteEngine, body
from mlx_notebook.schema import Schema
from tests.server_harness import free_port, misbehaving_server, mlx_lm_server, stop

PROMPT = "Hello world. The quick brown fox"


@pytest.fixture(scope="module")
def server(tiny_dir):
    with mlx_lm_server(tiny_dir) as (base, proc):
        yield base
    assert proc.poll() is not None  # torn down


@pytest.fixture(scope="module")
def endless_server(endless_dir):
    """A server whose greedy text never ends: Stop always lands mid-stream.

    ``tiny_dir``'s model ends its text after a few hundred tokens, a fraction of a
    second on the server: a test that stops mid-stream would race that end.
    """
    with mlx_lm_server(endless_dir) as (base, proc):
        yield base
    assert proc.poll() is not None


@pytest.fixture
def remote(server):
    eng = RemoteEngine(server)
    yield eng
    eng.close()


def test_spec_parsing_and_routing(server):
    assert remote_spec("http://h:1/v1#m").model == "m"
    assert remote_spec("https://h/v1/").base_url == "https://h/v1"
    assert remote_spec("default") is None
    route = backend_for(f"{server}#tiny")
    assert route.model == "tiny" and route.backend.base_url == server
    assert backend_for(f"{server}#other").backend is route.backend  # one engine per server
    assert backend_for("some/model", server_url=server).model == "some/model"


def test_request_body_maps_the_options():
    b = body(Request("hi", model="m", temperature=0.5, top_p=0.9, top_k=5, seed=3,
                     stop=["END"], max_tokens=7, draft="d", num_draft_tokens=2))  # fmt: skip
    assert b["messages"] == [{"role": "user", "content": "hi"}] and b["model"] == "m"
    assert (b["temperature"], b["top_p"], b["top_k"], b["seed"], b["max_tokens"]) == (
        0.5, 0.9, 5, 3, 7)  # fmt: skip
    assert b["stop"] == ["END"] and b["draft_model"] == "d" and b["num_draft_tokens"] == 2
    raw = body(Request("hi", chat=False, system="sys"))
    assert raw["prompt"] == "sys\n\nhi" and "messages" not in raw


@pytest.mark.parametrize("chat", [False, True])
def test_greedy_text_equals_the_local_engine(remote, engine, tiny_dir, chat):
    req = dict(chat=chat, max_tokens=30)
    local = engine.submit(Request(PROMPT, model=tiny_dir, **req)).result(timeout=60)
    evs = list(remote.submit(Request(PROMPT, **req)).events(timeout=60))
    fin = evs[-1]
    assert fin.text == local.text and fin.finish_reason == local.finish_reason
    assert [type(e).__name__ for e in evs[:2]] == ["Queued", "Started"]
    assert "".join(e.text for e in evs if isinstance(e, Token)) == fin.text
    s = fin.stats
    assert s.generation_tokens == local.stats.generation_tokens and s.prompt_tokens > 0
    assert s.ttft_s > 0 and s.generation_tps > 0


def streaming(eng, tokens: int):
    """A job on an endless server's model, once ``tokens`` tokens have arrived."""
    job = eng.submit(Request(PROMPT, chat=False, max_tokens=100_000))
    n = 0
    for ev in job.events(detach=True):
        n += isinstance(ev, Token)
        if n == tokens:
            break
    return job


def test_stop_mid_stream_keeps_the_text_and_the_server_serves_on(endless_server):
    remote = RemoteEngine(endless_server)
    try:
        job = streaming(remote, 20)
        job.cancel()
        fin = job.wait(10)  # closing the stream is immediate: 10 s is over 100x the usual
        assert fin.finish_reason == "cancelled" and fin.text.startswith(job.text[:10]) and fin.text
        nxt = remote.submit(Request(PROMPT, chat=False, max_tokens=5)).result(timeout=60)
        assert nxt.finish_reason == "length" and nxt.text
    finally:
        remote.close()


def test_jobs_queue_fifo_and_a_queued_one_can_be_dropped(remote):
    a = remote.submit(Request(PROMPT, chat=False, max_tokens=200))
    b = remote.submit(Request(PROMPT, chat=False, max_tokens=5))
    c = remote.submit(Request(PROMPT, chat=False, max_tokens=5))
    assert c.position == 2
    c.cancel()
    assert c.wait(1).finish_reason == "cancelled"
    assert a.result(timeout=60).finish_reason == "length"
    assert b.result(timeout=60).finish_reason == "length"


def test_lookup_needs_a_local_model(remote):
    with pytest.raises(ValueError, match="--lookup .* needs a local model"):
        remote.submit(Request(PROMPT, draft="lookup"))


def test_status_lists_the_server_and_its_models(remote, tiny_dir):
    info = remote.info()
    assert info.kind == "remote" and info.device == remote.base_url
    assert [m.name for m in info.models] == [tiny_dir]
    assert "reachable" in info.format()


def one_line_error(fin, *words):
    assert fin.finish_reason == "error"
    assert "\n" not in fin.error and "Traceback" not in fin.error
    for w in words:
        assert w in fin.error, fin.error


def test_no_server_is_one_line():
    eng = RemoteEngine(f"http://127.0.0.1:{free_port()}/v1")
    try:
        fin = eng.submit(Request("hi")).wait(30)
        one_line_error(fin, "could not connect", "is the server running")
        assert "unreachable" in eng.info().format()
    finally:
        eng.close()


def test_http_error_carries_the_servers_message(remote):
    fin = remote.submit(Request("hi", model="/no/such/model/dir")).wait(60)
    one_line_error(fin, "HTTP 4")


def test_malformed_event_keeps_the_partial_text():
    with misbehaving_server("malformed") as url:
        eng = RemoteEngine(url)
        try:
            fin = eng.submit(Request("hi")).wait(30)
        finally:
            eng.close()
    one_line_error(fin, "malformed event")
    assert fin.text == "partial"


def test_timeout_is_one_line():
    with misbehaving_server("silent") as url:
        eng = RemoteEngine(url, timeout=0.5)
        try:
            fin = eng.submit(Request("hi")).wait(30)
        finally:
            eng.close()
    one_line_error(fin, "no answer", "in time")


def test_server_killed_mid_stream_keeps_the_partial_text(endless_dir):
    with mlx_lm_server(endless_dir) as (base, proc):
        eng = RemoteEngine(base)
        try:
            job = streaming(eng, 10)
            stop(proc)
            fin = job.wait(30)
        finally:
            eng.close()
    one_line_error(fin, "closed the connection mid-stream")
    assert len(fin.text) > 0


def test_compare_with_a_server_side_draft_reports_both_runs(server, tiny_dir):
    import mlx_notebook

    res = mlx_notebook.compare(
        PROMPT, model=f"{server}", draft=tiny_dir, repeats=1, chat=False, max_tokens=20,
        metric="decode",
    )  # fmt: skip
    assert [role for _, role, _ in res.runs] == ["normal", "speculative"]
    assert res.identical is True  # compared as text: servers give no token ids
    assert "acceptance not reported by the server" in res.verdict_line()


@pytest.mark.kernel
def test_generate_streams_from_the_server_in_a_real_kernel_and_stops(endless_server):
    from tests.kernel_harness import Harness

    server = endless_server
    k = Harness()
    try:
        assert k.execute("%load_ext mlx_notebook")["status"] == "ok"
        before = set(k.state)
        mid = k.execute(f"%%generate -m {server} -n 99999 --raw -f text -o r\n{PROMPT}", wait=False)
        assert k.reply(mid, 30)["status"] == "ok"  # returns at once
        html, button = k.new_view(before)
        k.wait_for("streaming", lambda: "generating" in (k.value(html, "value") or ""), 30)
        assert server in k.value(html, "value")  # the header names the server's model
        k.click(button)
        doc = k.wait_for("final document", lambda: k.final_output(mid), 30)
        assert "stopped" in doc["text/html"] and doc["text/plain"].endswith(" · stopped")
        _, out = k.output("print(r.finish_reason, len(r.text) > 0)", 10)
        assert "cancelled True" in out
        _, out = k.output(f"%config MLXNotebook.server_url = {server!r}\n%mlx status", 10)
        assert "backend: remote" in out and server in out
    finally:
        k.close()


SHAPE = {
    "type": "object",
    "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["word", "n"],
}


def test_a_schema_goes_out_as_response_format():
    b = body(Request("hi", schema=SHAPE))
    assert b["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SHAPE, "strict": True},
    }
    assert "response_format" not in body(Request("hi"))


@pytest.mark.parametrize(
    "reply, problem",
    [
        ("Sure! Here is the data.", "not JSON"),
        ('{"word": "hi"}', "'n' is a required property"),
        ('{"word": "hi", "n": 2}', None),
    ],
)
def test_a_server_that_ignores_the_schema_is_said_so_and_value_refuses(reply, problem):
    # mlx_lm.server, like many servers, ignores response_format: the reply is checked
    # on the client and never passed off as valid.
    from mlx_notebook.engine import Notice
    from mlx_notebook.value_check import InvalidValue

    bodies = []
    with misbehaving_server(f"reply:{reply}", bodies) as url:
        eng = RemoteEngine(url)
        try:
            job = eng.submit(Request("hi", schema=SHAPE, chat=False))
            res = job.result(timeout=30)
        finally:
            eng.close()
    assert bodies[0]["response_format"]["json_schema"]["schema"] == SHAPE
    assert res.finish_reason == "stop" and res.text == reply
    notes = [e.message for e in job.events() if isinstance(e, Notice)]
    if problem is None:
        assert res.value == {"word": "hi", "n": 2} and not notes
        return
    assert (
        len(notes) == 1
        and notes[0].startswith("the server ignored the schema (response_format): ")
        and problem in notes[0]
    )
    with pytest.raises(InvalidValue, match="^value: the text does not follow the schema"):
        _ = res.value


@pytest.mark.parametrize("schema", [["a", "b"], Schema.regex("[0-9]+")])
def test_choices_and_patterns_need_a_local_model(remote, schema):
    with pytest.raises(ValueError, match="^schema: a server takes JSON Schemas only"):
        remote.submit(Request("hi", schema=schema))


def test_mlx_lm_server_streams_no_logprobs_and_that_is_said(remote):
    from mlx_notebook.engine import Notice
    from mlx_notebook.engine.remote.client import NO_LOGPROBS

    job = remote.submit(Request(PROMPT, chat=False, max_tokens=8, temperature=0, logprobs=2))
    res = job.result(timeout=60)
    plain = remote.submit(Request(PROMPT, chat=False, max_tokens=8, temperature=0))
    assert res.text == plain.result(timeout=60).text and not res.records
    assert [e.message for e in job.events() if isinstance(e, Notice)] == [NO_LOGPROBS]


def _entry(token, lp, *alts):
    return {"token": token, "logprob": lp, "bytes": list(token.encode()),
            "top_logprobs": [{"token": t, "logprob": v} for t, v in alts]}  # fmt: skip


def test_a_servers_streamed_logprobs_become_records_in_both_api_shapes():
    # The OpenAI shapes (vLLM, llama.cpp's server, LM Studio stream them): chat
    # completions' content list, and legacy completions' parallel lists.
    chat = [
        {"choices": [{"index": 0, "delta": {"content": "Hi"},
                      "logprobs": {"content": [_entry("Hi", -0.1, ("Hi", -0.1), ("Yo", -2.5))]}}]},
        {"choices": [{"index": 0, "delta": {"content": " <b>x"},  # two tokens, one chunk
                      "logprobs": {"content": [_entry(" <b>", -1.5, (" the", -0.7), (" <b>", -1.5)),
                                               _entry("x", -0.01, ("x", -0.01))]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]  # fmt: skip
    legacy = [
        {"choices": [{"index": 0, "text": "Hi",
                      "logprobs": {"tokens": ["Hi"], "token_logprobs": [-0.1],
                                   "top_logprobs": [{"Yo": -2.5, "Hi": -0.1}]}}]},
        {"choices": [{"index": 0, "text": " <b>x",
                      "logprobs": {"tokens": [" <b>", "x"], "token_logprobs": [-1.5, -0.01],
                                   "top_logprobs": [{" the": -0.7, " <b>": -1.5},
                                                    {"x": -0.01}]}}]},
        {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]},
    ]  # fmt: skip
    for chunks, is_chat in ((chat, True), (legacy, False)):
        bodies = []
        with misbehaving_server("chunks", bodies, chunks) as url:
            eng = RemoteEngine(url)
            try:
                res = eng.submit(Request("hi", chat=is_chat, logprobs=2)).result(timeout=30)
            finally:
                eng.close()
        assert bodies[0]["logprobs"] is True and bodies[0]["top_logprobs"] == 2
        assert res.text == "Hi <b>x" and [r.text for r in res.tokens] == ["Hi", " <b>", "x"]
        t = res.tokens
        assert [r.index for r in t] == [0, 1, 2] and [r.rank for r in t] == [1, 2, 1]
        assert t[1].top == ((" the", -1, -0.7), (" <b>", -1, -1.5)) and t[1].logprob == -1.5
        assert all(r.source == "model" and r.token_id == -1 for r in t)
        from mlx_notebook.notebook.views.inspect import inspect_html

        html = inspect_html(t)
        assert html.count('class="tk b') == 5 + 3 and "&lt;b&gt;" in html
        assert html.count("<b>") == 3  # the cards' own heads: the model's "<b>" is escaped
        assert "entropy" not in html  # a server sends none: not shown as nan


def test_without_httpx_a_job_fails_naming_it_and_is_never_cancelled(monkeypatch):
    # A bare install without httpx: the client's thread cannot start its HTTP client.
    import sys

    from mlx_notebook.engine import GenerationError
    from mlx_notebook.engine.remote.client import RemoteEngine

    monkeypatch.setitem(sys.modules, "httpx", None)  # `import httpx` raises ImportError
    eng = RemoteEngine("http://127.0.0.1:9/v1")
    try:
        for _ in range(2):  # whether the thread died before or after the submit
            job = eng.submit(Request("hi", max_tokens=4))
            fin = job.wait(timeout=10)
            assert fin.finish_reason == "error", fin
            assert "httpx" in fin.error and "pip install httpx" in fin.error
            with pytest.raises(GenerationError, match="httpx"):
                job.result()
        assert eng.closed and "httpx" in eng.info().closed
    finally:
        eng.close()


def test_server_results_replay_and_no_secret_is_ever_stored(server, tmp_path, monkeypatch):
    # A planted API key and a password in the URL go through the result cache and a
    # saved notebook: neither string may be in the cache file, the provenance or the file.
    import json

    import nbformat
    from nbclient import NotebookClient

    from mlx_notebook.origin import provenance

    key, password = "sk-PLANTED-KEY-4711", "pw-PLANTED-0815"
    url = server.replace("http://", f"http://user:{password}@")
    monkeypatch.setenv("MLX_NOTEBOOK_RESULT_CACHE", "deterministic")  # kernels inherit these
    monkeypatch.setenv("MLX_NOTEBOOK_API_KEY", key)
    cell = f"%%generate -m {url} -t 0 -n 6 --raw -o r --wait\nHello"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (
        "%load_ext mlx_notebook", cell, "first = r", cell,
        "import json\nprint(json.dumps([first.text, r.text, first.stats.replayed is None, "
        "r.stats.replayed is not None]))",
    )]  # fmt: skip
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(tmp_path))
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    out = "".join(o.get("text", "") for o in nb.cells[4].outputs if o.output_type == "stream")
    a, b, fresh, replayed = json.loads(out)
    assert a == b and a and fresh and replayed  # the second came from the cache
    stored = b"".join(p.read_bytes() for p in (tmp_path / ".mlx_notebook").iterdir())
    saved = path.read_text()  # the cells' sources hold the URL: only outputs are checked
    rows = provenance(path)
    rows = json.dumps(rows.to_dict("records") if hasattr(rows, "to_dict") else rows, default=str)
    assert len(stored) > 0
    for secret in (key, password):
        assert secret.encode() not in stored
        assert secret not in rows
        outputs = json.dumps([c.get("outputs", []) for c in json.loads(saved)["cells"]])
        assert secret not in outputs
