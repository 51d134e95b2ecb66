"""Building the native code: never at import; at set-up or at the first CPU model load."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux fast path")

# Records every call of a build function and every process started while importing.
SPY = """
import json, sys
calls = []
NAMES = {"build_library", "build_all", "build", "_compile", "first_that_compiles"}
def spy(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name in NAMES and "mlx_notebook" in code.co_filename:
        calls.append(code.co_name)
sys.setprofile(spy)
sys.addaudithook(lambda ev, args: ev == "subprocess.Popen" and calls.append(str(args[0])))
import mlx_notebook
{after}
sys.setprofile(None)
from mlx_notebook.cpu import blas
print(json.dumps({"calls": calls, "mlx": "mlx.core" in sys.modules,
                  "reason": blas.status()["gemv_reason"]}))
"""


def run(code, cache, **env):
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "MLX_NOTEBOOK_CACHE": str(cache), **env},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_importing_with_an_empty_cache_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    got = json.loads(run(SPY.replace("{after}", ""), cache).splitlines()[-1])
    assert got["calls"] == [] and not got["mlx"]
    assert got["reason"].startswith("not built yet")
    assert not cache.exists()  # nothing written either


def test_the_spy_sees_a_build_when_there_is_one(tmp_path):
    # The same spy around an explicit build: it would have caught one at import.
    code = SPY.replace("{after}", "import mlx_notebook.cpu.build as b; b.build_library()")
    got = json.loads(run(code, tmp_path / "c", CC="/bin/false").splitlines()[-1])
    assert "build_library" in got["calls"] and "/bin/false" in got["calls"]


def test_the_first_cpu_model_load_builds_it_and_the_next_process_loads_it(tmp_path, tiny_dir):
    cache = tmp_path / "cache"
    first = run(
        "import json, mlx_notebook as mn\n"
        f"r = mn.generate('Hello', model={tiny_dir!r}, chat=False, max_tokens=3)\n"
        "from mlx_notebook.cpu import blas, ext\n"
        "print(json.dumps([blas.status(), ext.status(), ext.attention() is not None]))",
        cache,
    )
    status, ext_status, attention = json.loads(first.splitlines()[-1])
    assert status["gemv_reason"].startswith("built at this model load")
    assert not status["gemv"]  # it loaded after MLX: its products wait for a restart
    assert ext_status.startswith("on native kernels (built)") and attention
    again = json.loads(run(SPY.replace("{after}", ""), cache).splitlines()[-1])
    assert again["calls"] == [] and again["reason"].startswith("single-row products use")
    cli = run(
        "import runpy, sys; sys.argv = ['x', 'build']; "
        "runpy.run_module('mlx_notebook.cpu', run_name='__main__')",
        cache,
    )
    assert "library: cached" in cli and "extension: cached" in cli


def test_two_builds_at_once_never_share_an_object_file(tmp_path, monkeypatch):
    # Two kernels starting together build into the same folder: their temporary files
    # differ only after the last dot, so object names must keep the whole name.
    from mlx_notebook.cpu import ext

    log = tmp_path / "log"
    fake = tmp_path / "cc"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("CXX", str(fake))
    found = ext._versions()
    if isinstance(found, str):
        pytest.skip(found)
    mlx_dir, nb_dir, _ = found
    for tmp in ("._mlxnb_ext.so.abc123", "._mlxnb_ext.so.def456"):
        assert ext._compile(tmp_path / tmp, mlx_dir, nb_dir) is None
    objects = [a for line in log.read_text().splitlines() for a in line.split() if a.endswith(".o")]
    compiled = [
        line.split(" -o ")[1].split()[0] for line in log.read_text().splitlines() if " -c " in line
    ]
    assert len(compiled) == len(set(compiled)) >= 2 and set(compiled) <= set(objects)
