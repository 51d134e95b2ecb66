import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The result cache replays repeated greedy requests, which most tests make on purpose to
# compare runs: off for the suite (kernels it starts inherit it); its own tests turn it on.
os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")

import pytest  # noqa: E402

import mlx_notebook  # noqa: E402,F401 - loads OpenBLAS before mlx
from mlx_notebook.engine import Engine  # noqa: E402
from mlx_notebook.testing import (  # noqa: E402
    ScriptedModel,
    VirtualClock,
    build_tiny_model,
    looping_model,
    script_rule,
)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="session")
def endless_dir(tmp_path_factory):
    """``tiny_dir``'s model whose greedy text never ends: a stream to stop mid-way."""
    return str(build_tiny_model(tmp_path_factory.mktemp("endless"), endless=True))


@pytest.fixture(scope="session")
def other_vocab_dir(tmp_path_factory):
    """A tiny model whose vocabulary differs from ``tiny_dir``'s."""
    return str(build_tiny_model(tmp_path_factory.mktemp("other"), vocab_size=300))


@pytest.fixture(scope="session")
def draft_dir(tmp_path_factory):
    """A one-layer tiny model with ``tiny_dir``'s vocabulary: a draft model."""
    return str(build_tiny_model(tmp_path_factory.mktemp("cdraft"), seed=1, num_hidden_layers=1))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir):
    from pathlib import Path

    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(Path(tiny_dir))


@pytest.fixture(scope="session")
def think_tok(tmp_path_factory):
    """A tokenizer with ``<think>`` markers and a template that opens a thinking block."""
    from mlx_lm.utils import load_tokenizer

    from mlx_notebook.testing import build_tokenizer

    path = tmp_path_factory.mktemp("thinking")
    build_tokenizer(path, thinking=True)
    return load_tokenizer(path)


@pytest.fixture(scope="module")
def default_engine():
    """An engine with the bundled default model loaded (slow tests)."""
    from mlx_notebook.engine import Request

    eng = Engine()
    eng.submit(Request("hi", max_tokens=2)).result(timeout=300)  # load once
    yield eng
    eng.close()


@pytest.fixture
def engine():
    eng = Engine()
    yield eng
    eng.close()


@pytest.fixture
def scripted(engine, tiny_tokenizer):
    """register(name, outputs=..., prompt=..., **kw) -> (prompt_ids, name)."""

    def register(name, *, outputs=(), prompt="Hello", rule=None, **kw):
        ids = tiny_tokenizer.encode(prompt, add_special_tokens=False)
        fill = tiny_tokenizer.encode(" x", add_special_tokens=False)[0]
        rule = rule or script_rule(len(ids), list(outputs), fill)
        vocab = len(tiny_tokenizer.get_vocab())

        def build():
            engine.registry.register(name, ScriptedModel(vocab, rule, **kw), tiny_tokenizer)

        engine.call(build).result()
        return ids

    return register


@pytest.fixture
def virtual_clock(monkeypatch):
    """The prefill chunk timer, moved only by scripted models given this clock.

    Chunk sizes then follow the scripted costs exactly, on a loaded machine too.
    """
    from mlx_notebook.engine.decoding import prefill

    clock = VirtualClock()
    monkeypatch.setattr(prefill, "clock", clock)
    return clock


@pytest.fixture
def endless(engine, tiny_tokenizer):
    """Registers "endless": " and on" forever, a token per 5 ms; returns the name.

    For tests that stop a reply: the tiny random model ends its text by itself, and fast
    enough that a busy machine could see it finish before the test stops it.
    """
    model = engine.call(lambda: looping_model(tiny_tokenizer, " and on", 0.005)).result()
    engine.call(lambda: engine.registry.register("endless", model, tiny_tokenizer)).result()
    return "endless"


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


@pytest.fixture(scope="session")
def ipshell():
    """The test InteractiveShell (IPython's global test app), started once."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    start_ipython()
    return InteractiveShell.instance()
