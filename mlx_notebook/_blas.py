"""Load OpenBLAS ahead of MLX on Linux so MLX's CPU matmuls use it.

The ``mlx-cpu`` wheel links a reference BLAS. Loading OpenBLAS with
``RTLD_GLOBAL`` before ``mlx.core`` is imported makes the dynamic linker bind
MLX's ``cblas_sgemm`` to OpenBLAS instead. This must run before the first
``import mlx.core``, so ``mlx_notebook/__init__.py`` calls `preload` first.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings

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
    env = os.environ.get(ENV, "")
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
    _load_gemv(blas)  # before OpenBLAS joins the global scope, so MLX binds to it
    ctypes.CDLL(paths[0], mode=ctypes.RTLD_GLOBAL)  # promotes the loaded library
    _state.update(active=True, path=paths[0], reason="loaded before mlx.core", _blas=blas)


def _load_gemv(blas) -> None:
    from . import _native

    if not _native.fast_enabled():
        _state["gemv_reason"] = f"off ({_native.FAST_ENV}=0)"
        return
    path, how = _native.build_gemv()
    if path is None:
        _state["gemv_reason"] = how
        return
    try:
        sgemm = ctypes.cast(blas.cblas_sgemm, ctypes.c_void_p)
        sgemv = ctypes.cast(blas.cblas_sgemv, ctypes.c_void_p)
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib.mlxnb_gemv_init(sgemm, sgemv)  # before anything can call it
    except (OSError, AttributeError) as exc:
        _state["gemv_reason"] = f"could not load {path.name}: {exc}"
        return
    lib.mlxnb_gemv_forwarded.restype = ctypes.c_long
    lib.mlxnb_small_forwarded.restype = ctypes.c_long
    _state.update(
        gemv=True,
        gemv_reason=f"single-row products use sgemv, 2-24 rows a few-row kernel ({how})",
    )
    _state["_lib"] = lib


def native_library():
    """The fast path's loaded native library (``_gemv.c``, ``_attn.c``), or None."""
    return _state.get("_lib")


def gemv_calls() -> int:
    """Single-row products forwarded to sgemv so far (0 when the shim is not loaded)."""
    lib = _state.get("_lib")
    return int(lib.mlxnb_gemv_forwarded()) if lib is not None else 0


def few_row_calls() -> int:
    """Products of 2-24 rows computed by the few-row kernel so far (0 without the shim)."""
    lib = _state.get("_lib")
    return int(lib.mlxnb_small_forwarded()) if lib is not None else 0


def status() -> dict:
    """``{"active", "path", "reason", "gemv", "gemv_reason"}``: OpenBLAS and the sgemv shim."""
    return {k: v for k, v in _state.items() if not k.startswith("_")}


def thread_setters() -> list:
    """Functions ``f(n)`` that set the threads of the loaded CPU libraries (none: [])."""
    out = []
    blas = _state.get("_blas")
    if blas is not None and hasattr(blas, "openblas_set_num_threads"):
        out.append(blas.openblas_set_num_threads)
    lib = _state.get("_lib")
    if lib is not None and hasattr(lib, "mlxnb_set_threads"):
        out.append(lib.mlxnb_set_threads)
    return out


def blas_threads() -> int | None:
    """OpenBLAS's thread count now, or None when OpenBLAS is not loaded."""
    blas = _state.get("_blas")
    if blas is None or not hasattr(blas, "openblas_get_num_threads"):
        return None
    return int(blas.openblas_get_num_threads())
