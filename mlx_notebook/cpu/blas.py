"""Load OpenBLAS ahead of MLX on Linux so MLX's CPU matmuls use it.

The ``mlx-cpu`` wheel links a reference BLAS. Loading OpenBLAS with
``RTLD_GLOBAL`` before ``mlx.core`` is imported makes the dynamic linker bind
MLX's ``cblas_sgemm`` to OpenBLAS instead. This must run before the first
``import mlx.core``, so ``mlx_notebook/__init__.py`` calls `preload` first.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import warnings

from .. import config

ENV = "MLX_NOTEBOOK_BLAS"
CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)
FIX = (
    "install it with 'apt-get install libopenblas0-pthread', and import mlx_notebook "
    "(or run %load_ext mlx_notebook) before anything imports mlx; restart the kernel "
    "if mlx was already imported"
)

_state: dict = {
    "active": False,
    "path": None,
    "reason": "not attempted",
    "gemv": False,
    "gemv_reason": "not attempted",
    "core": "",  # the kernels OpenBLAS runs ("SkylakeX", "Haswell", ...)
    "sgemm": "",  # the kernels of a second OpenBLAS that computes sgemm ("": none)
}
_warned = False


def preload() -> None:
    """Load OpenBLAS globally if we can; record why not otherwise. Idempotent."""
    global _warned
    if _state["active"] or _state["reason"] != "not attempted":
        return
    if not sys.platform.startswith("linux"):
        _state["reason"] = "not needed off Linux (macOS uses Accelerate/Metal)"
        return
    env = config.get(ENV)
    if env == "0":
        _state["reason"] = f"disabled by {ENV}=0"
        return
    paths = [env] if env else [p for p in CANDIDATES if os.path.exists(p)]
    if not paths or not os.path.exists(paths[0]):
        _state["reason"] = f"no OpenBLAS found ({env or 'Debian paths'}); " + FIX
        return
    if "mlx.core" in sys.modules:
        _state["reason"] = "mlx.core was imported before mlx_notebook"
        if not _warned:
            _warned = True
            warnings.warn(
                "mlx_notebook: mlx.core was imported first, so OpenBLAS could not be "
                "loaded and CPU generation runs on the slow reference BLAS; " + FIX,
                RuntimeWarning,
                stacklevel=3,
            )
        return
    try:
        blas = ctypes.CDLL(paths[0], mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        _state["reason"] = f"could not load {paths[0]}: {exc}"
        return
    _state["_path"] = paths[0]
    reason, scope = "loaded before mlx.core", paths[0]
    better = _better_kernels(paths[0], blas)
    if better is not None:
        picked, (blas, scope) = _core(blas), better
        reason += f"; {_core(blas)} kernels, where it picked {picked} for this CPU"
    _state["core"] = _core(blas)
    _load_gemv(blas)  # before OpenBLAS joins the global scope, so MLX binds to it
    ctypes.CDLL(scope, mode=ctypes.RTLD_GLOBAL)  # promotes the loaded library
    _state.update(active=True, path=paths[0], reason=reason, _blas=blas)


SGEMM_ENV = "MLX_NOTEBOOK_BLAS_SGEMM"  # "0": one OpenBLAS for every product
AVX512 = {"avx512f", "avx512dq", "avx512bw", "avx512vl"}  # what its SkylakeX kernels use


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _core(lib) -> str:
    """The kernels an OpenBLAS chose ("Haswell", "SkylakeX", ...), or ""."""
    fn = getattr(lib, "openblas_get_corename", None)
    if fn is None:
        return ""
    fn.restype = ctypes.c_char_p
    return (fn() or b"").decode()


def _sgemm_library(path: str, blas):
    """A second OpenBLAS, with AVX-512 kernels, for sgemm; or None where none is wanted.

    Debian's OpenBLAS (0.3.21) gives AMD's AVX-512 CPUs its AVX2 (Haswell) kernels.
    Its AVX-512 (SkylakeX) sgemm prefilled 1.3-1.5x faster on such a CPU, but its
    sgemv decoded about 10% slower: so a copy of the library, loaded with
    ``OPENBLAS_CORETYPE=SkylakeX``, computes the shim's sgemm (prefill chunks,
    attention, 25 rows and more) and the first keeps sgemv. Only on a CPU with
    AVX-512 whose OpenBLAS runs AVX2 kernels (also when ``OPENBLAS_CORETYPE`` asked
    for them: the first library keeps them); ``MLX_NOTEBOOK_BLAS_SGEMM=0`` keeps one.
    """
    if not config.enabled(SGEMM_ENV):
        return None
    if _core(blas).lower() not in ("haswell", "zen") or not AVX512 <= _cpu_flags():
        return None
    loaded = _with_kernels(path, "SkylakeX")
    return loaded[0] if loaded else None


AVX2 = {"avx2", "fma"}
# Kernels that use what an AVX2 or AVX-512 CPU has (Haswell's and Zen's AVX2 ones get
# the AVX-512 sgemm beside them where the CPU has it: _sgemm_library).
CAPABLE = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"}


def _better_kernels(path: str, blas):
    """A copy of OpenBLAS with the kernels this CPU's flags allow, or None where it has them.

    OpenBLAS picks its kernels from a table of CPU models, and a CPU newer than the
    table gets the generic SSE3 ones: Debian's 0.3.21 runs "Prescott" kernels on
    Intel's Sapphire and Emerald Rapids Xeons (AVX-512, AMX). Measured on an Emerald
    Rapids VM (2 cores), float32 prefill ran at 111-120 tok/s with them and 356-519
    with SkylakeX's, decode at 16-17 tok/s against 26-36. So where OpenBLAS chose
    kernels below the flags, a copy loaded with ``OPENBLAS_CORETYPE`` set to SkylakeX
    (AVX-512) or Haswell (AVX2 and FMA) takes its place; a ``OPENBLAS_CORETYPE`` the
    user set is kept.

    Returns:
        ``(library, its path)``, or None.
    """
    flags = _cpu_flags()
    want = "SkylakeX" if AVX512 <= flags else "Haswell" if AVX2 <= flags else ""
    core = _core(blas).lower()
    if not want or not core or core in CAPABLE or os.environ.get("OPENBLAS_CORETYPE"):
        return None
    return _with_kernels(path, want)


def _with_kernels(path: str, core: str):
    """OpenBLAS from ``path`` loaded again, as a copy, with ``core``'s kernels; or None.

    Returns:
        ``(library, the copy's path)``, or None where it could not be loaded or
        runs other kernels than asked for.
    """
    from .build import cache_dir

    st = os.stat(path)
    copy = cache_dir() / f"libopenblas-{core.lower()}-{st.st_size}-{int(st.st_mtime)}.so"
    before = os.environ.get("OPENBLAS_CORETYPE")
    try:
        if not copy.exists():  # another path, so the loader keeps a second instance
            copy.parent.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_name(f".{copy.name}.{os.getpid()}")
            shutil.copyfile(path, tmp)
            os.replace(tmp, copy)
        os.environ["OPENBLAS_CORETYPE"] = core  # read once, as it loads
        lib = ctypes.CDLL(str(copy), mode=ctypes.RTLD_LOCAL)
    except OSError:
        return None
    finally:
        if before is None:
            os.environ.pop("OPENBLAS_CORETYPE", None)
        else:
            os.environ["OPENBLAS_CORETYPE"] = before
    return (lib, str(copy)) if _core(lib).lower() == core.lower() else None


NOT_BUILT = (
    "not built yet: run 'python -m mlx_notebook.cpu build' (scripts/setup.sh does), or the "
    "first CPU model load builds it"
)


def _load_gemv(blas, late: bool = False) -> None:
    """Load the fast path's library: at import only if built; ``late``: build it now.

    At import it is loaded globally before MLX, so its ``cblas_sgemm`` takes MLX's
    products. Built late (at the first CPU model load, after MLX), it is loaded
    locally: its attention kernels and helper thread serve the extension, and the
    products are its own only from the next process on.
    """
    from . import build

    if not build.fast_enabled():
        _state["gemv_reason"] = "off (MLX_NOTEBOOK_FAST=0)"
        return
    if late:
        path, how = build.build_library()
    else:
        path, how = build.built_library(), "cached"
        if path is None:
            _state["gemv_reason"] = NOT_BUILT
            return
    if path is None:
        _state["gemv_reason"] = how
        return
    fast = _sgemm_library(_state["_path"], blas)
    try:
        sgemm = ctypes.cast((fast or blas).cblas_sgemm, ctypes.c_void_p)
        sgemv = ctypes.cast(blas.cblas_sgemv, ctypes.c_void_p)
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL if late else ctypes.RTLD_GLOBAL)
        lib.mlxnb_gemv_init(sgemm, sgemv)  # before anything can call it
    except (OSError, AttributeError) as exc:
        _state["gemv_reason"] = f"could not load {path.name}: {exc}"
        return
    lib.mlxnb_gemv_forwarded.restype = ctypes.c_long
    lib.mlxnb_small_forwarded.restype = ctypes.c_long
    lib.mlxnb_tiled_forwarded.restype = ctypes.c_long
    lib.mlxnb_own_gemv.restype = ctypes.c_long
    lib.mlxnb_helper_holds.restype = ctypes.c_long
    lib.mlxnb_helper_tid.restype = ctypes.c_long
    core = _core(fast) if fast is not None else ""
    kernels = f", OpenBLAS's {core} sgemm" if core else ""
    tiles = int(lib.mlxnb_tile_rows())
    # one_row (gemv.c) is built where the row tiles are: with AVX-512
    one = "an AVX-512 kernel on two threads" if tiles else "sgemv"
    few = (
        f"2-{tiles} rows AVX-512 row tiles (a few-row kernel up to 24 where they do not fit)"
        if tiles
        else "2-24 rows a few-row kernel"
    )
    if late:
        _state["gemv_reason"] = (
            f"built at this model load ({how}): its attention kernels are in use; its "
            "single-row products take over after a kernel restart (it must load before MLX)"
        )
    else:
        _state.update(
            gemv=True,
            gemv_reason=f"single-row products use {one}, {few}{kernels} ({how})",
        )
    _state["_lib"], _state["_sgemm"], _state["sgemm"] = lib, fast, core


def load_late() -> None:
    """At the first CPU model load: build and load the library if import found none."""
    if _state["active"] and _state.get("_lib") is None and _state["gemv_reason"] == NOT_BUILT:
        _load_gemv(_state["_blas"], late=True)


def native_library():
    """The fast path's loaded native library (``gemv.c``, ``attn.c``), or None."""
    return _state.get("_lib")


def gemv_calls() -> int:
    """Single-row products the shim took so far (0 when it is not loaded)."""
    lib = _state.get("_lib")
    return int(lib.mlxnb_gemv_forwarded()) if lib is not None else 0


def few_row_calls() -> int:
    """Products of 2-24 rows (2-48 with AVX-512) by the few-row kernel or row tiles so far."""
    lib = _state.get("_lib")
    return int(lib.mlxnb_small_forwarded()) if lib is not None else 0


def row_tile_calls() -> int:
    """Of those, the products computed by the AVX-512 row tiles (2 to 48 rows)."""
    lib = _state.get("_lib")
    return int(lib.mlxnb_tiled_forwarded()) if lib is not None else 0


def status() -> dict:
    """OpenBLAS and the shim, as ``%mlx status`` shows them.

    Keys: ``active``, ``path``, ``reason``, ``gemv``, ``gemv_reason``, ``core`` (its
    kernels) and ``sgemm`` (a second OpenBLAS's kernels, or "").
    """
    return {k: v for k, v in _state.items() if not k.startswith("_")}


def thread_setters() -> list:
    """Functions ``f(n)`` that set the threads of the loaded CPU libraries (none: [])."""
    out = []
    for blas in (_state.get("_blas"), _state.get("_sgemm")):
        if blas is not None and hasattr(blas, "openblas_set_num_threads"):
            out.append(blas.openblas_set_num_threads)
    lib = _state.get("_lib")
    if lib is not None and hasattr(lib, "mlxnb_set_threads"):
        out.append(lib.mlxnb_set_threads)
    return out
