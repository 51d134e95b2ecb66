"""Build, once, the fast path's native code: one manifest, one cache, one compiler lookup.

Two things are built from ``csrc/``, each into the cache folder, keyed by a hash of
every file under ``csrc/`` (so no source or header can be left out of the key) and
of the CPU, and written atomically:

- the library (``csrc/lib/*.c``): the single-row product shim that must be loaded
  before MLX (`blas`), the attention kernels and the helper thread, loaded with ctypes;
- the MLX extension (``csrc/kernels/*.c`` and ``csrc/bindings/*.cpp``, see `ext`).

Nothing here runs at ``import mlx_notebook``: ``python -m mlx_notebook.cpu build``
(run by ``scripts/setup.sh``) or the first CPU model load builds it. No compiler,
no fast path: generation then runs exactly as in mlx-lm, and ``%mlx status`` says why.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import config

CSRC = Path(__file__).with_name("csrc")
INCLUDE = CSRC / "include"


def sources(part: str) -> tuple[Path, ...]:
    """The sources of one part of ``csrc/`` (``lib``, ``kernels`` or ``bindings``), sorted."""
    suffix = ".cpp" if part == "bindings" else ".c"
    return tuple(sorted((CSRC / part).glob(f"*{suffix}")))


def manifest() -> tuple[Path, ...]:
    """Every file under ``csrc/``: what a build's key is made of."""
    return tuple(sorted(p for p in CSRC.rglob("*") if p.is_file()))


FLAGS = (
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3", "-march=native"),
    ("-O2",),
)


def cpu_id() -> bytes:
    """The CPU's model and flags: code built with ``-march=native`` is for this CPU only."""
    try:
        info = Path("/proc/cpuinfo").read_bytes()
    except OSError:
        return b""
    return b"".join(line for line in info.splitlines() if line.startswith((b"flags", b"model")))


def fast_enabled() -> bool:
    """Whether the CPU fast path is wanted (``MLX_NOTEBOOK_FAST=0`` turns it off)."""
    return config.enabled("MLX_NOTEBOOK_FAST")


def cache_dir() -> Path:
    """Where built native code lives."""
    return config.cache_root() / "native"


def key(extra: bytes = b"") -> str:
    """A short hash of every file under ``csrc/``, the CPU and ``extra``."""
    h = hashlib.sha1()
    for p in manifest():
        h.update(p.relative_to(CSRC).as_posix().encode() + b"\0" + p.read_bytes())
    return hashlib.sha1(h.digest() + cpu_id() + extra).hexdigest()[:12]


def first_that_compiles(command: Callable[[tuple[str, ...]], list[str]], timeout: float = 120):
    """Run ``command(flags)`` for each of `FLAGS`, fastest first, until one compiles.

    Returns:
        The last run's ``CompletedProcess`` and its flags.
    """
    for flags in FLAGS:  # OpenMP or -march=native may be missing
        res = subprocess.run(command(flags), capture_output=True, text=True, timeout=timeout)
        if res.returncode == 0:
            break
    return res, flags


def build_atomically(out: Path, build: Callable[[Path], str | None]) -> tuple[Path | None, str]:
    """Run ``build(tmp)`` beside ``out``, then move the result into place atomically.

    Args:
        out: The file to make.
        build: Writes the file it is given; returns None, or why it failed.

    Returns:
        ``(out, "built")``, or None and the reason (nothing half-written is left).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        why = build(Path(tmp))
        if why is not None:
            return None, why
        os.replace(tmp, out)  # atomic: readers see all or nothing
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"building it failed: {exc}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out, "built"


def library_path() -> Path:
    """Where the library for these sources and this CPU lives (built or not)."""
    return cache_dir() / f"libmlxnb_gemv-{key()}.so"


def built_library() -> Path | None:
    """The library when it is built already, else None (never builds)."""
    out = library_path()
    return out if out.is_file() else None


def build_library() -> tuple[Path | None, str]:
    """Path of the built library (building it if needed), or None and the reason."""
    out = library_path()
    if out.is_file():
        return out, "cached"
    cc = config.compiler("cc")
    if cc is None:
        return None, "no C compiler to build it (install gcc)"
    srcs = [str(s) for s in sources("lib")]

    def build(tmp: Path) -> str | None:
        res, _ = first_that_compiles(
            lambda flags: [
                cc, *flags, f"-I{INCLUDE}", "-shared", "-fPIC", "-pthread", "-o", str(tmp),
                *srcs, "-lm",
            ],
            timeout=60,
        )  # fmt: skip
        if res.returncode != 0:
            return "building it failed: " + (res.stderr.strip().splitlines() or ["failed"])[0][:200]
        return None

    return build_atomically(out, build)
