"""Cancel points between layers: which models get them, exactness, and the roll-back."""

import mlx.core as mx
import pytest

from mlx_notebook.engine.cache.sequence import CachedSequence
from mlx_notebook.engine.decoding import layer_gates
from mlx_notebook.testing.families import build_family

IDS = list(range(20, 60))


@pytest.fixture(scope="module", params=["gemma3_text", "qwen3_5", "falcon_h1", "llama"])
def family(request, tmp_path_factory):
    from mlx_lm import load

    path = build_family(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, load(str(path))[0]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from mlx_lm import load

    path = build_family("llama", tmp_path_factory.mktemp("gated"), num_hidden_layers=4)
    return load(str(path))[0]


def test_only_full_attention_caches_get_cancel_points(family):
    name, model = family
    seq = CachedSequence(model)
    # A sliding window or a recurrent state cannot roll a partial pass back.
    assert layer_gates.points(model, seq.cache) == (len(model.layers) if name == "llama" else 0)


def test_a_gated_pass_is_exact_and_stops_where_asked(llama):
    want = CachedSequence(llama).forward(IDS[:30])
    layer_gates.install(llama)
    layer_gates.install(llama)  # idempotent: one subclass deep
    assert all(type(x).__name__.count("Gated") == 1 for x in llama.layers)
    seq = CachedSequence(llama)
    with layer_gates.opened(lambda: False, 1, 4) as gate:
        got = seq.forward(IDS[:30])
        mx.eval(got)
    assert gate.points == 3  # after layers 1-3: none after the last
    assert mx.array_equal(got, want).item()  # evaluation points change no value
    with layer_gates.opened(lambda: False, 2, 4) as gate:
        seq.forward([7])
    assert gate.points == 1  # after layer 2 only
    out = CachedSequence(llama).forward(IDS[:3])  # no gate open: layers run as before
    assert out.shape[1] == 3


def test_a_stopped_pass_rolls_back_and_the_sequence_goes_on_exactly(llama):
    layer_gates.install(llama)
    seq = CachedSequence(llama)
    seq.forward(IDS[:10])
    seq.defer(IDS[10:12])  # pending tokens go in front of the next pass
    asked = []

    def stop():
        asked.append(1)
        return len(asked) == 2  # at the second cancel point: layers 1-2 fed

    with pytest.raises(layer_gates.Aborted), layer_gates.opened(stop, 1, 4):
        seq.forward(IDS[12:30])
    fed = [c.offset for c in seq.cache]
    assert fed == [30, 30, 10, 10]  # the partial pass, before the roll-back
    seq.drop_partial()
    assert [c.offset for c in seq.cache] == [10] * 4
    assert seq.tokens == IDS[:12] and seq.pending == IDS[10:12] and seq.passes == 1
    got = seq.forward(IDS[12:30])[0, -1]
    want = CachedSequence(llama).forward(IDS[:30])[0, -1]
    assert mx.allclose(got, want, atol=1e-5).item()
    assert seq.consistent() and seq.replayed == 0
