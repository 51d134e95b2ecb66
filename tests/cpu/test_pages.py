"""Weights on transparent huge pages: the packing primitive, and models that take its copies."""

import pytest

import mlx_notebook  # noqa: F401 - OpenBLAS and the shim first, as in the engine
from mlx_notebook.cpu import ext as _ext
from mlx_notebook.cpu import fast as cpu_fast
from mlx_notebook.cpu import pages as cpu_pages
from mlx_notebook.testing import tiny_config


@pytest.fixture(scope="module")
def ext():
    mod = _ext.load()
    assert mod is not None, _ext.status()  # gcc, g++ and nanobind are installed here
    return mod


def _address(a) -> int:
    import numpy as np

    return np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data


def test_huge_pack_copies_every_array_into_one_aligned_buffer(ext):
    import mlx.core as mx

    w = mx.random.normal((1000, 1100), key=mx.random.key(0))  # 4.4 MB: whole huge pages
    arrays = [
        mx.arange(5, dtype=mx.float32),
        mx.arange(24, dtype=mx.uint32).reshape(2, 3, 4),
        w.T,  # not row-contiguous: packed as its values, row-major
        mx.ones((3, 7), dtype=mx.float16),
        w,
    ]
    before = ext.huge_advised()
    packed = ext.huge_pack(arrays)
    mx.eval(packed)
    for a, p in zip(arrays, packed):
        assert p.shape == a.shape and p.dtype == a.dtype
        assert mx.array_equal(p, a).item()
    addrs = [_address(p) for p in packed if p.dtype != mx.float16]
    assert all(a % 64 == 0 for a in addrs)  # each on a cache line
    assert max(addrs) - min(addrs) < 2 * w.nbytes + 4096  # one buffer, in order
    assert addrs == sorted(addrs)
    mode = cpu_pages.thp_mode()
    if mode in ("always", "madvise"):
        assert ext.huge_advised() > before  # at least the 2 MiB stretch of one page


def test_a_model_on_huge_pages_computes_what_it_did(ext, tiny_dir):
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load

    model = load(tiny_dir)[0]
    model.set_dtype(mx.float32)
    cpu_fast.apply(model, "cpu")
    x = mx.array([[5, 17, 99, 3, 42, 8]])
    want = model(x)
    mx.eval(want)
    old = {k: mx.array(v) for k, v in tree_flatten(model.parameters())}
    line = cpu_pages.install(model)
    if cpu_pages.thp_mode() in ("always", "madvise"):
        assert line.startswith("weights on huge pages (")
    new = dict(tree_flatten(model.parameters()))
    assert new.keys() == old.keys()
    assert all(mx.array_equal(new[k], old[k]).item() for k in old)
    addrs = sorted(_address(a) for a in new.values())
    total = sum(a.nbytes for a in new.values())
    assert addrs[-1] - addrs[0] < total + 64 * len(addrs)  # all in the one buffer
    assert mx.array_equal(model(x), want).item()  # the same values: bit-identical logits


def test_huge_pages_are_skipped_with_a_reason(ext, tiny_dir, tmp_path, monkeypatch):
    from mlx_lm import load

    model = load(tiny_dir)[0]
    thp = tmp_path / "enabled"
    thp.write_text("always madvise [never]\n")
    monkeypatch.setattr(cpu_pages, "THP", thp)
    assert cpu_pages.thp_mode(thp) == "never"
    assert cpu_pages.install(model) == "weights on 4 KiB pages: transparent huge pages are never"
    monkeypatch.setattr(cpu_pages, "THP", tmp_path / "missing")
    assert cpu_pages.install(model).endswith("transparent huge pages are unavailable")
    thp.write_text("always [madvise] never\n")
    monkeypatch.setattr(cpu_pages, "THP", thp)
    monkeypatch.setattr(cpu_pages, "available_bytes", lambda: 1000)
    assert "needs twice that free" in cpu_pages.install(model)  # a group of it
    monkeypatch.setenv(cpu_pages.ENV, "0")
    assert cpu_pages.install(model) is None


def test_the_engine_names_the_huge_pages(engine, tiny_dir):
    from mlx_notebook.engine import Request

    engine.submit(Request("Hello", model=tiny_dir, chat=False, max_tokens=4)).result(timeout=300)
    fast = engine.info().models[-1].fast_path
    mode = cpu_pages.thp_mode()
    want = "weights on huge pages (" if mode in ("always", "madvise") else "weights on 4 KiB pages"
    assert any(line.startswith(want) for line in fast), fast


class _Counting:
    """The extension, with its ``huge_pack`` calls and their sizes recorded."""

    def __init__(self, ext):
        self._ext, self.packs = ext, []

    def __getattr__(self, name):
        return getattr(self._ext, name)

    def huge_pack(self, arrays):
        self.packs.append(sum(a.nbytes for a in arrays))
        return self._ext.huge_pack(arrays)


def test_the_copy_goes_a_group_at_a_time_and_never_holds_the_weights_twice(ext, monkeypatch):
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    args = llama.ModelArgs.from_dict(
        tiny_config(
            1000,
            hidden_size=512,
            intermediate_size=1408,
            num_hidden_layers=4,
            num_attention_heads=8,
        )
    )
    model = llama.Model(args)  # 48 MB of float32 weights
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    x = mx.array([[5, 17, 99, 3]])
    want = model(x)
    mx.eval(want)
    total = sum(a.nbytes for _, a in tree_flatten(model.parameters()))
    counting = _Counting(ext)
    monkeypatch.setattr(_ext, "load", lambda: counting)
    mx.clear_cache()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    line = cpu_pages.install(model, group_bytes=total // 6)
    if cpu_pages.thp_mode() not in ("always", "madvise"):
        pytest.skip(line)
    grew = mx.get_peak_memory() - before
    assert len(counting.packs) >= 6 and sum(counting.packs) == total
    assert max(counting.packs) <= total // 6
    # Each group's originals are freed before the next is copied: at most one group
    # beyond the weights, plus each buffer's spare huge page (allocated for the
    # alignment, never written), where one buffer for all of them held every
    # weight twice.
    spare = len(counting.packs) * (2**21 + 2**12)
    assert grew <= max(counting.packs) + spare < total, (grew, total)
    assert mx.array_equal(model(x), want).item()


def _big_embedding_model():
    import mlx.core as mx
    from mlx_lm.models import llama

    args = llama.ModelArgs.from_dict(
        tiny_config(16384, hidden_size=256, intermediate_size=512, num_hidden_layers=2)
    )
    model = llama.Model(args)  # a 16 MiB embedding; every other parameter under 1 MiB
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model


@pytest.mark.parametrize("kernel_can", [True, False])
def test_a_parameter_bigger_than_a_group_is_moved_in_place_not_copied(ext, monkeypatch, kernel_can):
    import mlx.core as mx
    from mlx.utils import tree_flatten

    if cpu_pages.thp_mode() not in ("always", "madvise"):
        pytest.skip("no transparent huge pages here")
    model = _big_embedding_model()
    x = mx.array([[5, 17, 99, 3]])
    want = model(x)
    mx.eval(want)
    params = dict(tree_flatten(model.parameters()))
    total = sum(a.nbytes for a in params.values())
    emb = params["model.embed_tokens.weight"]
    at = _address(emb)
    calls = []
    real = cpu_pages.madvise

    def madvise(addr, length, advice):
        rc = real(addr, length, advice) if kernel_can else 22  # EINVAL: before Linux 6.1
        calls.append((addr, length, advice, rc))
        return rc

    monkeypatch.setattr(cpu_pages, "madvise", madvise)
    counting = _Counting(ext)
    monkeypatch.setattr(_ext, "load", lambda: counting)
    line = cpu_pages.install(model, group_bytes=4 * 2**20)
    after = dict(tree_flatten(model.parameters()))["model.embed_tokens.weight"]
    # Only the embedding was offered to the kernel: its whole 2 MiB pages, in place
    lo, hi = -(-at // 2**21) * 2**21, (at + emb.nbytes) // 2**21 * 2**21
    assert [c[:3] for c in calls] == [(lo, hi - lo, cpu_pages.MADV_COLLAPSE)]
    # Moved exactly when the kernel did it (6.1+, with huge pages to be had)
    moved = "moved in place" in line
    assert moved == (calls[0][3] == 0), (line, calls)
    if moved:
        assert _address(after) == at  # not copied
        assert sum(counting.packs) == total - emb.nbytes
        assert line.endswith(", 1 moved in place)"), line
    else:  # the kernel cannot: copied, a group of its own, as before
        assert _address(after) != at
        assert sum(counting.packs) == total and emb.nbytes in counting.packs
    assert max(p for p in counting.packs if p != emb.nbytes) <= 4 * 2**20
    assert mx.array_equal(model(x), want).item()


def test_trim_hands_back_the_kernels_kept_scratch(ext):
    # release_freed (after a prefill, at idle) calls trim: the layers' scratch goes too
    import mlx.core as mx

    E, F, rows = 64, 128, 24
    lin = lambda n, k: list(mx.quantize(mx.ones((n, k)) * 0.01, group_size=32, bits=4))  # noqa: E731
    a, x = mx.ones((rows, 2, 1, E // 2)), mx.ones((rows, 1, E))
    mx.eval(ext.layer_out(a, x, lin(E, E), mx.ones((E,)), 1e-5, lin(2 * F, E), lin(E, F)))
    assert ext.scratch_held()[0] >= 4 * rows * (E + 2 * F)
    cpu_pages.trim()
    assert ext.scratch_held()[0] == 0
