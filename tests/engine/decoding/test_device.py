"""The device's extras: on a GPU nothing of the CPU fast path is imported."""

import json
import subprocess
import sys

FAKE_GPU = """
import json, sys
import mlx_notebook as mn
import mlx.core as mx
import mlx_lm.generate  # makes its stream on the real device first
mx.default_device = lambda: mx.Device(mx.gpu)  # what our code asks; MLX still computes
r = mn.generate("Hello", model={model!r}, chat=False, max_tokens=4, temperature=0.5, seed=1)
status = mn.Engine.default().info().format()
print(json.dumps({{"reason": r.finish_reason, "tokens": r.stats.generation_tokens,
    "cpu": sorted(m for m in sys.modules if m.startswith("mlx_notebook.cpu")),
    "status": status}}))
"""


def test_on_a_gpu_nothing_of_the_cpu_fast_path_is_imported(tiny_dir):
    out = subprocess.run(
        [sys.executable, "-c", FAKE_GPU.format(model=tiny_dir)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["reason"] == "length" and got["tokens"] == 4
    # Only the preload (OpenBLAS and an already built library), which runs at import on
    # Linux, before MLX can say which device it has.
    preload = {"mlx_notebook.cpu", "mlx_notebook.cpu.blas", "mlx_notebook.cpu.build"}
    allowed = preload if sys.platform == "linux" else set()
    assert set(got["cpu"]) <= allowed, got["cpu"]
    assert "CPU fast path: not used (the GPU computes)" in got["status"]


def test_on_the_cpu_the_fast_path_is_imported_with_the_model(tiny_dir):
    code = FAKE_GPU.replace("mx.default_device = lambda: mx.Device(mx.gpu)", "")
    out = subprocess.run(
        [sys.executable, "-c", code.format(model=tiny_dir)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert {"mlx_notebook.cpu.fast", "mlx_notebook.cpu.threads"} <= set(got["cpu"])
    assert "CPU fast path:" in got["status"] and "not used" not in got["status"]
