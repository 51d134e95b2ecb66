"""Build, once, the small native library of the CPU fast path (``_gemv.c`` and others).

Sources: ``_gemv.c``, ``_attn.c`` and ``_helper.c``. Compiled with the system C
compiler into the cache folder, keyed by the source's hash, and written atomically.
No compiler, no fast path: generation then runs exactly as in mlx-lm, and ``%mlx
status`` says why.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

FAST_ENV = "MLX_NOTEBOOK_FAST"
SOURCES = tuple(Path(__file__).with_name(n) for n in ("_gemv.c", "_attn.c", "_helper.c"))
# included: _vec8.h by _attn.c and _layer.c, _vec16.h (AVX-512) by _gemv.c, _attn.c and
# _qmm.c, _attn512.h (AVX-512) by _attn.c
HEADERS = tuple(Path(__file__).with_name(n) for n in ("_vec8.h", "_vec16.h", "_attn512.h"))


FLAGS = (
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3", "-march=native"),
    ("-O2",),
)


def _cpu_id() -> bytes:
    try:
        info = Path("/proc/cpuinfo").read_bytes()
    except OSError:
        return b""
    return b"".join(line for line in info.splitlines() if line.startswith((b"flags", b"model")))


def fast_enabled() -> bool:
    """Whether the CPU fast path is wanted (``MLX_NOTEBOOK_FAST=0`` turns it off)."""
    return os.environ.get(FAST_ENV, "1") != "0"


def _cache_dir() -> Path:
    return (
        Path(os.environ.get("MLX_NOTEBOOK_CACHE") or Path.home() / ".cache" / "mlx_notebook")
        / "native"
    )


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


def build_gemv() -> tuple[Path | None, str]:
    """Path of the built library (building it if needed), or None and the reason."""
    src = b"".join(s.read_bytes() for s in (*SOURCES, *HEADERS))
    # Built for this CPU (-march=native), so the CPU is part of the key too.
    key = hashlib.sha1(src + _cpu_id()).hexdigest()[:12]
    out = _cache_dir() / f"libmlxnb_gemv-{key}.so"
    if out.is_file():
        return out, "cached"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler to build it (install gcc)"

    def build(tmp: Path) -> str | None:
        res, _ = first_that_compiles(
            lambda flags: [
                cc,
                *flags,
                "-shared",
                "-fPIC",
                "-pthread",
                "-o",
                str(tmp),
                *map(str, SOURCES),
                "-lm",
            ],
            timeout=60,
        )
        if res.returncode != 0:
            return "building it failed: " + (res.stderr.strip().splitlines() or ["failed"])[0][:200]
        return None

    return build_atomically(out, build)
