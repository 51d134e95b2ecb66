"""OpenBLAS preloading, checked in fresh interpreters."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_notebook.cpu import blas as _blas

SNIPPET = (
    "import json, mlx_notebook as mn; from mlx_notebook.cpu import blas as _blas; e = mn.Engine(); "
    "print(json.dumps(_blas.status())); print(e.info().device); e.close()"
)


def run(code, **env):
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return out


CPUINFO = Path("/proc/cpuinfo")
AVX512 = CPUINFO.exists() and "avx512f" in CPUINFO.read_text(errors="ignore")


needs_openblas = pytest.mark.skipif(
    not any(os.path.exists(p) for p in _blas.CANDIDATES),
    reason="OpenBLAS not installed (apt-get install libopenblas0-pthread)",
)


@needs_openblas
def test_info_reports_active_acceleration():
    out = run(SNIPPET, MLX_NOTEBOOK_BLAS="")
    status = json.loads(out.stdout.splitlines()[0])
    assert status["active"] is True and "openblas" in status["path"]
    maps = run("import mlx_notebook, mlx.core; print(open('/proc/self/maps').read())").stdout
    assert "libopenblas" in maps


def test_disabled_by_env():
    status = json.loads(run(SNIPPET, MLX_NOTEBOOK_BLAS="0").stdout.splitlines()[0])
    assert status["active"] is False and "MLX_NOTEBOOK_BLAS=0" in status["reason"]


def test_warns_once_when_mlx_was_imported_first():
    out = run(
        "import warnings; warnings.simplefilter('always'); import mlx.core; "
        "import mlx_notebook, json; from mlx_notebook.cpu import blas as _blas; "
        "_blas.preload(); print(json.dumps(_blas.status()))",
        MLX_NOTEBOOK_BLAS="",
    )
    assert json.loads(out.stdout)["active"] is False
    if any(os.path.exists(p) for p in _blas.CANDIDATES):
        assert out.stderr.count("mlx.core was imported first") == 1
        assert "libopenblas0-pthread" in out.stderr


@needs_openblas
def test_single_row_products_are_taken_and_agree_with_numpy():
    # x @ W.T (every Linear's decode step) on AVX-512: the shim's own kernel, split with
    # the helper thread; x @ W and CPUs without AVX-512: OpenBLAS's sgemv.
    code = (
        "import json, mlx_notebook, numpy as np; from mlx_notebook.cpu import blas as _blas; "
        "import mlx.core as mx; lib = _blas.native_library(); "
        "a = mx.random.normal((1, 581)); w = mx.random.normal((1536, 581)); "
        "b = mx.random.normal((5, 581)); y = a @ w.T; mx.eval(y); "
        "own, helper = lib.mlxnb_own_gemv(), lib.mlxnb_helper_calls(); "
        "z = b @ w.T; t = a @ w[:581].T.T; mx.eval(z, t); "
        "n, f = _blas.gemv_calls(), _blas.few_row_calls(); "
        "own2, helper2 = lib.mlxnb_own_gemv(), lib.mlxnb_helper_calls(); "
        "err = float(np.abs(np.array(y) - np.array(a) @ np.array(w).T).max()); "
        "err2 = float(np.abs(np.array(t) - np.array(a) @ np.array(w[:581])).max()); "
        "err3 = float(np.abs(np.array(z) - np.array(b) @ np.array(w).T).max()); "
        "print(json.dumps([_blas.status(), n, f, own, helper, own2, helper2, err, err2, err3]))"
    )
    out = json.loads(run(code, MLX_NOTEBOOK_BLAS="").stdout.splitlines()[-1])
    status, n, f, own, helper, own2, helper2, err, err2, err3 = out
    assert status["gemv"] is True
    assert n == 2  # the two single-row products
    assert f == 1  # the five-row one, by the row tiles (AVX-512) or the few-row kernel
    if AVX512:  # 581: a masked tail of 5 floats
        assert "AVX-512 kernel on two threads" in status["gemv_reason"]
        assert own == 1 and helper == 1  # the first, 892K multiply-adds: split
        assert own2 == 1 and helper2 == 1  # x @ W: sgemv
    else:
        assert "sgemv" in status["gemv_reason"] and own == own2 == 0
    assert err < 1e-3 and err2 < 1e-3 and err3 < 1e-3


@needs_openblas
@pytest.mark.parametrize("k,n", [(581, 203), (576, 204)])  # the row tiles take the second
@pytest.mark.parametrize("m", [2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 24, 25, 32, 48, 49])
def test_few_row_products_agree_with_numpy_for_every_row_count(m, k, n):
    code = (
        "import json, mlx_notebook, numpy as np; from mlx_notebook.cpu import blas as _blas; "
        f"import mlx.core as mx; b = mx.random.normal(({m}, {k})); "
        f"w = mx.random.normal(({n}, {k})); bias = mx.random.normal(({n},)); "
        "z = b @ w.T; zb = mx.addmm(bias, b, w.T, alpha=0.5, beta=2.0); mx.eval(z, zb); "
        "B, W = np.array(b), np.array(w); "
        "e1 = float(np.abs(np.array(z) - B @ W.T).max()); "
        "e2 = float(np.abs(np.array(zb) - (0.5 * B @ W.T + 2 * np.array(bias))).max()); "
        "print(json.dumps([_blas.few_row_calls(), _blas.row_tile_calls(), e1, e2]))"
    )
    calls, tiled, e1, e2 = json.loads(run(code, MLX_NOTEBOOK_BLAS="").stdout)
    # the plain product, where k is a multiple of 16 and n even, with AVX-512: 2-48 rows
    assert tiled == (1 if AVX512 and 2 <= m <= 48 and k % 16 == 0 else 0)
    # the scaled one (addmm) takes the few-row kernel up to 24 rows, then OpenBLAS's sgemm
    assert calls == (m <= 24) + (m <= 24 or tiled)
    assert e1 < 1e-3 and e2 < 1e-3


@needs_openblas
@pytest.mark.skipif(not AVX512, reason="the row tiles are AVX-512's")
@pytest.mark.parametrize("omp_threads,helped", [("2", 1), ("4", 0)])
def test_row_tiles_share_the_helper_on_two_cores(omp_threads, helped):
    # A 16-row product's groups of weight rows go to the calling thread and helper.c's
    # where OpenMP would run two threads (held awake through a batched step's layers), to
    # OpenMP's team where it would run more.
    code = (
        "import json, mlx_notebook, numpy as np; from mlx_notebook.cpu import blas as _blas; "
        "import mlx.core as mx; lib = _blas.native_library(); "
        "a = mx.random.normal((16, 576)); w = mx.random.normal((1024, 576)); mx.eval(a, w); "
        "before = lib.mlxnb_helper_calls(); y = a @ w.T; mx.eval(y); "
        "err = float(np.abs(np.array(y) - np.array(a) @ np.array(w).T).max()); "
        "print(json.dumps([_blas.row_tile_calls(), lib.mlxnb_helper_calls() - before, err]))"
    )
    out = run(code, MLX_NOTEBOOK_BLAS="", OMP_NUM_THREADS=omp_threads).stdout.splitlines()[-1]
    tiled, calls, err = json.loads(out)
    assert tiled == 1 and calls == helped and err < 1e-3


def test_fast_path_off_by_env():
    status = json.loads(run(SNIPPET, MLX_NOTEBOOK_FAST="0").stdout.splitlines()[0])
    assert status["gemv"] is False and "MLX_NOTEBOOK_FAST=0" in status["gemv_reason"]


@needs_openblas
def test_no_compiler_means_no_fast_path_and_generation_still_works(tmp_path, tiny_dir):
    code = (
        "import json, mlx_notebook as mn; "
        f"r = mn.generate('Hello', model={tiny_dir!r}, chat=False, max_tokens=3); "
        "from mlx_notebook.cpu import blas as _blas; "
        "print(json.dumps([_blas.status(), r.finish_reason]))"
    )
    out = run(code, MLX_NOTEBOOK_CACHE=str(tmp_path), CC="/bin/false", MLX_NOTEBOOK_BLAS="")
    status, reason = json.loads(out.stdout.splitlines()[-1])
    assert status["gemv"] is False and "building it failed" in status["gemv_reason"]
    assert status["active"] is True and reason == "length"


@needs_openblas
@pytest.mark.parametrize("switch", ["", "0"])
def test_avx512_sgemm_from_a_second_openblas_where_the_first_runs_avx2(switch):
    # Debian's OpenBLAS gives AMD's AVX-512 CPUs AVX2 kernels (here also asked for by
    # OPENBLAS_CORETYPE): a second copy computes sgemm with AVX-512 ones; sgemv stays.
    code = (
        "import json, os, numpy as np, mlx_notebook; import mlx.core as mx; "
        "from mlx_notebook.cpu import blas as _blas; "
        "a = np.random.default_rng(0).standard_normal((300, 576), dtype=np.float32); "
        "b = np.random.default_rng(1).standard_normal((1536, 576), dtype=np.float32); "
        "got = np.array(mx.array(a) @ mx.array(b).T); "
        "err = float(np.abs(got - a @ b.T).max()); "
        "print(json.dumps([_blas.status(), os.environ['OPENBLAS_CORETYPE'], err]))"
    )
    env = dict(MLX_NOTEBOOK_BLAS="", OPENBLAS_CORETYPE="Haswell", MLX_NOTEBOOK_BLAS_SGEMM=switch)
    status, coretype, err = json.loads(run(code, **env).stdout.splitlines()[-1])
    avx512 = _blas.AVX512 <= _blas._cpu_flags()
    assert status["sgemm"] == ("SkylakeX" if avx512 and switch == "" else "")
    assert ("SkylakeX sgemm" in status["gemv_reason"]) == bool(status["sgemm"])
    assert coretype == "Haswell" and err < 1e-2  # the variable is as it was


def test_no_second_openblas_without_avx512_or_where_the_first_has_its_kernels(monkeypatch):
    blas = _blas._state.get("_blas")
    if blas is None:
        pytest.skip("OpenBLAS is not loaded")
    monkeypatch.setattr(_blas, "_cpu_flags", lambda: {"avx2", "fma"})
    assert _blas._sgemm_library(_blas._state["_path"], blas) is None
    monkeypatch.setattr(_blas, "_cpu_flags", lambda: set(_blas.AVX512))
    monkeypatch.setattr(_blas, "_core", lambda lib: "SkylakeX")
    assert _blas._sgemm_library(_blas._state["_path"], blas) is None


def _without_coretype(code, **env):
    """The last line of ``code``'s output, as JSON, run where OPENBLAS_CORETYPE is unset."""
    env = {**{k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}, **env}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.splitlines()[-1])


@needs_openblas
def test_kernels_match_the_cpu_where_openblas_picks_generic_ones():
    # Debian's OpenBLAS gives CPUs newer than its table (Sapphire/Emerald Rapids) its
    # SSE3 "Prescott" kernels: a copy with the kernels the flags allow takes its place.
    # In a fresh interpreter, before any OpenBLAS is global: a copy loaded after one
    # is would bind its own globals to that one's (and run its kernels).
    code = """if 1:
        import ctypes, json, os, mlx_notebook
        from mlx_notebook.cpu import blas as _blas
        path = next(p for p in _blas.CANDIDATES if os.path.exists(p))
        blas, real = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL), _blas._core
        _blas._core = lambda lib: "Prescott" if lib is blas else real(lib)
        got = []
        for flags in (_blas.AVX512 | _blas.AVX2, _blas.AVX2, {"sse3"}):
            _blas._cpu_flags = lambda flags=flags: flags
            found = _blas._better_kernels(path, blas)
            env_left = "OPENBLAS_CORETYPE" in os.environ
            got.append(found and [real(found[0]), found[1] != path, env_left])
        os.environ["OPENBLAS_CORETYPE"] = "Prescott"  # the user's choice stays
        got.append(_blas._better_kernels(path, blas))
        del os.environ["OPENBLAS_CORETYPE"]
        _blas._core = real  # kernels it picked itself: kept where they use the flags
        got.append([real(blas), _blas._better_kernels(path, blas)])
        print(json.dumps(got))
    """
    avx512, avx2, plain, asked, (own, kept) = _without_coretype(code, MLX_NOTEBOOK_BLAS="0")
    assert avx512 == ["SkylakeX", True, False] and avx2 == ["Haswell", True, False]
    assert plain is None and asked is None
    if own.lower() in _blas.CAPABLE:
        assert kept is None


@needs_openblas
def test_loaded_kernels_use_the_cpus_vector_units():
    # On this CPU, whatever OpenBLAS would pick by itself: never the generic kernels
    # where the CPU has AVX2 (float32 prefill ran 3-4x slower on them).
    code = "import json, mlx_notebook as m; print(json.dumps(m._blas.status()))"
    status = _without_coretype(code, MLX_NOTEBOOK_BLAS="")
    if not _blas.AVX2 <= _blas._cpu_flags():
        pytest.skip("no AVX2 on this CPU")
    assert status["core"].lower() in _blas.CAPABLE
    if "where it picked" in status["reason"]:  # and says which it replaced
        picked = status["reason"].split("where it picked ")[1].split()[0]
        assert picked.lower() not in _blas.CAPABLE and status["core"] in status["reason"]
