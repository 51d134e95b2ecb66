"""OpenBLAS preloading, checked in fresh interpreters."""

import json
import os
import subprocess
import sys

import pytest

from mlx_notebook import _blas

SNIPPET = (
    "import json, mlx_notebook as mn; e = mn.Engine(); "
    "print(json.dumps(e.info()['blas'])); print(e.info()['device']); e.close()"
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
        "import mlx_notebook, json; from mlx_notebook import _blas; "
        "_blas.preload(); print(json.dumps(_blas.status()))",
        MLX_NOTEBOOK_BLAS="",
    )
    assert json.loads(out.stdout)["active"] is False
    if any(os.path.exists(p) for p in _blas.CANDIDATES):
        assert out.stderr.count("mlx.core was imported first") == 1
        assert "libopenblas0-pthread" in out.stderr
