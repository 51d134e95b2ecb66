"""Every ``MLX_NOTEBOOK_*`` environment variable, declared and read in this one place.

Each variable is read through `get` when the setting takes effect (at import for
OpenBLAS, at a model load for the fast path's switches, at a job for the rest), so
``os.environ[...] = ...`` in a notebook before that moment is honoured. The
documentation's configuration table is built from `VARIABLES`, and a test checks
that no module reads a variable this table does not declare.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variable:
    """One environment variable.

    Attributes:
        name: Its name.
        default: Its value when unset ("" for none).
        means: What it does, one or two sentences (the docs' table).
        fast_path: Whether it belongs to the optional CPU fast path.
    """

    name: str
    default: str
    means: str
    fast_path: bool = False


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "MLX_NOTEBOOK_CACHE",
        "~/.cache/mlx_notebook",
        "Folder for converted GGUF models and the fast path's built native code.",
    ),
    Variable(
        "MLX_NOTEBOOK_API_KEY",
        "",
        "Bearer token sent to server models (``http(s)://`` specs) when none is given.",
    ),
    Variable(
        "MLX_NOTEBOOK_DEFAULT_VARIANT",
        "auto",
        "Precision of the bundled default model: ``q4`` (its own 4-bit weights) or "
        "``f32``. ``auto``: 4-bit on Metal and where the fast path's kernels load, else f32.",
    ),
    Variable(
        "MLX_NOTEBOOK_PROMPT_CACHE_MB",
        "auto",
        "Memory for cached prompts (KV caches kept for reuse), in MB; ``0`` turns reuse off. "
        "``auto``: a quarter of the memory available.",
    ),
    Variable(
        "MLX_NOTEBOOK_RESULT_CACHE",
        "deterministic",
        "Which results are stored and replayed: ``deterministic`` (greedy or seeded "
        "requests), ``all`` (also unseeded sampling: its first sample) or ``off``.",
    ),
    Variable(
        "MLX_NOTEBOOK_RESULT_CACHE_PATH",
        ".mlx_notebook/cache.sqlite",
        "The result cache's SQLite file; a relative path is taken from the working "
        "directory (a notebook's folder).",
    ),
    Variable(
        "MLX_NOTEBOOK_FAST",
        "1",
        "``0`` turns the whole CPU fast path off: generation then runs as in mlx-lm.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_BLAS",
        "",
        "OpenBLAS to load ahead of MLX on Linux: a path, or ``0`` for none. "
        "Empty: Debian's usual paths.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_BLAS_SGEMM",
        "1",
        "``0``: one OpenBLAS for every product, no second copy with AVX-512 sgemm kernels.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_THREADS",
        "auto",
        "Threads of the CPU libraries: ``auto`` follows the machine (fewer when other "
        "processes take the cores), or a fixed count.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_AMX",
        "1",
        "``0`` leaves Intel AMX tiles unused where the CPU has them.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_INT_DOTS",
        "1",
        "``0``: 4- and 8-bit products keep float32 inputs, instead of inputs rounded to "
        "16 bits and integer dots for decode steps and prefill (CPUs with AVX-512 VNNI).",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_PREFILL_INT8",
        "0",
        "``1``: prefill's 4- and 8-bit products round their inputs to 8 bits, as "
        "llama.cpp's do, instead of to 16 (with the integer dots on): faster prefill, "
        "but a prompt's text then depends on how it was chunked.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_FUSED_ATTENTION",
        "1",
        "``0``: attention on MLX's own operations instead of the native kernels.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_FUSED_LAYERS",
        "1",
        "``0``: llama-style layers as mlx-lm runs them, not as two native calls each.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_HUGE_PAGES",
        "1",
        "``0``: weights stay where MLX put them, not on transparent huge pages.",
        fast_path=True,
    ),
    Variable(
        "MLX_NOTEBOOK_NATIVE_SAMPLING",
        "1",
        "``0``: sampling's row work (greedy pick, nucleus filter, draw) on MLX's operations.",
        fast_path=True,
    ),
)
# Variables of other tools that this package honours (documented beside its own).
FOREIGN = {
    "CC": "C compiler for the fast path's native code (default: cc, then gcc).",
    "CXX": "C++ compiler for the fast path's MLX extension (default: c++, then g++).",
    "HF_HUB_OFFLINE": "``1``: hub ids load from the local Hugging Face cache only.",
    "OPENBLAS_CORETYPE": "Kernels OpenBLAS should run; when set, kept as the user chose.",
}
_BY_NAME = {v.name: v for v in VARIABLES}


def get(name: str) -> str:
    """The value of a declared variable: the environment's, else its default.

    Raises:
        KeyError: ``name`` is not declared in `VARIABLES` (so it cannot go undocumented).
    """
    var = _BY_NAME[name]
    value = os.environ.get(name, "").strip()
    return value or var.default


def enabled(name: str) -> bool:
    """Whether a switch (default ``1``) is on: anything but ``0`` is on."""
    return get(name) != "0"


def cache_root() -> Path:
    """``$MLX_NOTEBOOK_CACHE`` or ``~/.cache/mlx_notebook``: every cached file lives below."""
    return Path(get("MLX_NOTEBOOK_CACHE")).expanduser()


def compiler(kind: str) -> str | None:
    """The C (``"cc"``) or C++ (``"cxx"``) compiler: ``$CC``/``$CXX``, else the usual names."""
    env, names = ("CC", ("cc", "gcc")) if kind == "cc" else ("CXX", ("c++", "g++"))
    import shutil

    found = os.environ.get(env) or next(filter(None, map(shutil.which, names)), None)
    return found or None
