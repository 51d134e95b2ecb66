"""Build and load, once, the fast path's MLX extension (``csrc/kernels``, ``csrc/bindings``).

Its MLX primitives compute quantized products, decode steps' attention, the fused
parts of a llama layer's decode step (``layer.c``) and sampling's row work (the
greedy pick, logsumexp, the nucleus filter and the draw: ``argmax.c``, ``sample.c``)
on the CPU, and copy weights onto huge pages (``bindings/pages.cpp``).
Compiled against the installed ``mlx`` with nanobind in mlx's own domain, so
it takes and returns ``mlx.core.array``. Built with the system compilers into
the cache folder, keyed by the sources, the CPU, and the mlx, nanobind and
Python versions, and written atomically. Anything missing (a compiler,
nanobind, mlx's headers) or an mlx built with another nanobind ABI leaves
quantized products, decode attention and decoder layers on MLX's own operations, and
`status` says why.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sysconfig
from pathlib import Path

from .. import config
from .build import INCLUDE, build_atomically, cache_dir, fast_enabled, first_that_compiles, key
from .build import sources as _sources

NAME = "_mlxnb_ext"
AMX_ENV = "MLX_NOTEBOOK_AMX"  # 0: no AMX tiles, where the CPU has them
DOTS_ENV = "MLX_NOTEBOOK_INT_DOTS"  # 0: quantized products keep float32 inputs
PREFILL8_ENV = "MLX_NOTEBOOK_PREFILL_INT8"  # 1: prefill's inputs at 8 bits
NANOBIND = "3.1.0"  # the nanobind whose internals (v22) mlx's own bindings use
_state: dict = {"module": None, "reason": "not attempted", "inputs8": False}


def _versions() -> tuple[Path, Path, str] | str:
    """Mlx's package folder, nanobind's, and a version key; or why they are unusable."""
    try:
        import mlx.core as mx
        import nanobind
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install nanobind=={NANOBIND})"
    mlx_dir = Path(mx.__file__).parent
    if not (mlx_dir / "include" / "mlx" / "primitives.h").is_file():
        return "this mlx ships no C++ headers"
    nb_dir = Path(nanobind.__file__).parent
    key = f"{mx.__version__}|{nanobind.__version__}|{sysconfig.get_config_var('EXT_SUFFIX')}"
    return mlx_dir, nb_dir, key


def _compile(tmp: Path, mlx_dir: Path, nb_dir: Path) -> str | None:
    cc, cxx = config.compiler("cc"), config.compiler("cxx")
    if cc is None or cxx is None:
        return "no C/C++ compiler to build it (install gcc and g++)"
    kernels, glue = _sources("kernels"), _sources("bindings")
    objs = [tmp.with_name(f"{tmp.name}-{src.stem}.o") for src in kernels]  # unique per build
    flags: tuple = ()
    inc = f"-I{INCLUDE}"
    for src, obj in zip(kernels, objs):
        cmd = lambda f, src=src, obj=obj: [cc, *f, inc, "-fPIC", "-c", "-o", str(obj), str(src)]  # noqa: E731
        res, flags = first_that_compiles(cmd)
        if res.returncode != 0:
            err = (res.stderr.strip().splitlines() or ["?"])[0][:200]
            return f"compiling {src.name} failed: {err}"
    omp = ["-fopenmp"] if "-fopenmp" in flags else []
    cmd = [
        cxx, "-O2", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden",
        "-fno-strict-aliasing", "-DNB_DOMAIN=mlx", "-DNDEBUG", "-DNB_COMPACT_ASSERTIONS",
        f"-I{sysconfig.get_paths()['include']}", f"-I{nb_dir / 'include'}",
        f"-I{nb_dir / 'ext' / 'robin_map' / 'include'}", f"-I{mlx_dir / 'include'}", inc,
        str(nb_dir / "src" / "nb_combined.cpp"), *map(str, glue), *map(str, objs),
        f"-L{mlx_dir / 'lib'}", "-lmlx", f"-Wl,-rpath,{mlx_dir / 'lib'}", *omp, "-o", str(tmp),
    ]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        for obj in objs:
            obj.unlink(missing_ok=True)
    if res.returncode != 0:
        err = [ln for ln in res.stderr.splitlines() if "error" in ln] or res.stderr.splitlines()
        return "compiling the extension failed: " + (err or ["?"])[0][:200]
    return None


def build() -> tuple[Path | None, str]:
    """Path of the built extension (building it if needed), or None and the reason."""
    found = _versions()
    if isinstance(found, str):
        return None, found
    mlx_dir, nb_dir, versions = found
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    out = cache_dir() / f"{NAME}-{key(versions.encode())}" / f"{NAME}{suffix}"
    if out.is_file():
        return out, "cached"
    return build_atomically(out, lambda tmp: _compile(tmp, mlx_dir, nb_dir))


def _check(mod) -> str | None:
    """None when the extension computes what mx.quantized_matmul does; else why not."""
    try:
        mod.set_int_dots(0)  # the float path: MLX's sums up to rounding
        agrees = _agrees(mod, 64, 4, 1e-4, seed=0)
    except (TypeError, AttributeError):
        return "it was built with a nanobind whose ABI differs from this mlx's"
    return None if agrees else "its check product differs from mx.quantized_matmul"


def _agrees(
    mod, k: int, bits: int, tol: float, seed: int, rows: int = 1, inputs8: bool = False
) -> bool:
    """Whether one random (rows, k) x (8, k) product equals ``mx.quantized_matmul``'s.

    With ``inputs8``, a prefill pass's product, within ``tol`` of the largest output, with
    stored biases and with symmetric blocks (no biases: GGUF's Q4_0 and Q8_0).
    """
    import mlx.core as mx

    w = mx.random.normal((8, k), key=mx.random.key(seed))
    x = mx.random.normal((rows, k), key=mx.random.key(seed + 1))
    wq, s, b = mx.quantize(w, group_size=32, bits=bits)
    got = mod.quant_matmul(x, wq, s, b, 32, bits, inputs8)
    want = mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=32, bits=bits)
    if inputs8:
        sym = mod.quant_matmul(x, wq, s, None, 32, bits, True)
        sym_b = s * -(2 ** (bits - 1))
        sym_want = mx.quantized_matmul(x, wq, s, sym_b, transpose=True, group_size=32, bits=bits)
        return all(
            (mx.abs(g - v).max() <= tol * mx.abs(v).max()).item()
            for g, v in ((got, want), (sym, sym_want))
        )
    return mx.allclose(got, want, rtol=tol, atol=tol).item()


def int_dots(mod) -> str:
    """Turn the integer dot products on or off as ``MLX_NOTEBOOK_INT_DOTS`` says.

    With them on, every quantized product rounds its inputs to 16 bits a unit of 32
    (1/65278 of the unit's largest), a decode step's take integer dots and products of
    16 rows or more integer sums, so one product of each is checked against
    ``mx.quantized_matmul`` within that rounding. With ``MLX_NOTEBOOK_PREFILL_INT8=1``
    a prefill pass's products round them to 8 bits (1/254 of the unit's largest, as
    llama.cpp's do): checked within 2 % of the largest output.

    Returns:
        The status line's words for them: in use, off by the variable or by a failed
        check, or nothing where the CPU has no VNNI.
    """
    _state["inputs8"] = False
    if not config.enabled(DOTS_ENV):
        mod.set_int_dots(0)
        return f"; integer dots off ({DOTS_ENV}=0)"
    if not mod.set_int_dots(1):
        return ""
    if not all(_agrees(mod, 256, b, 1e-3, seed=2, rows=r) for b in (4, 5, 6, 8) for r in (1, 16)):
        mod.set_int_dots(0)
        return "; integer dots off (their check product differs)"
    if not config.enabled(PREFILL8_ENV):
        return "; integer dots for decode steps and prefill"
    if not all(
        _agrees(mod, 256, b, 2e-2, seed=3, rows=r, inputs8=True)
        for b in (4, 5, 6, 8)
        for r in (1, 33)
    ):
        return "; integer dots for decode steps and prefill (at 16 bits: the 8-bit check differs)"
    _state["inputs8"] = True
    return "; integer dots for decode steps and prefill (prefill's inputs at 8 bits)"


def prefill_inputs8() -> bool:
    """Whether a prefill pass's quantized products take 8-bit inputs (`int_dots`)."""
    return _state["inputs8"]


def load():
    """The loaded extension module, or None (`status` says why). Worker thread only."""
    if _state["module"] is not None or _state["reason"] != "not attempted":
        return _state["module"]
    if not fast_enabled():
        _state["reason"] = "off (MLX_NOTEBOOK_FAST=0)"
        return None
    from . import blas

    blas.load_late()  # the library's attention kernels, if import found it unbuilt
    path, how = build()
    if path is None:
        _state["reason"] = how
        return None
    try:
        spec = importlib.util.spec_from_file_location(NAME, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except ImportError as exc:
        _state["reason"] = f"could not load it: {exc}"
        return None
    why = _check(mod)
    if why is not None:
        _state["reason"] = why
        return None
    extras = amx_tiles(mod) + int_dots(mod)
    _state.update(module=mod, reason=f"on native kernels ({how}){extras}")
    _library_kernels(mod)
    return mod


def amx_tiles(mod) -> str:
    """Turn the AMX tiles on or off as ``MLX_NOTEBOOK_AMX`` says.

    Returns:
        The status line's words for them: in use, off by the variable, or nothing where
        the CPU has none (or Linux refuses this process their state, as a VM may).
    """
    if not config.enabled(AMX_ENV):
        mod.set_amx(0)
        return f"; AMX tiles off ({AMX_ENV}=0)"
    return "; AMX tiles for products of several rows" if mod.set_amx(1) else ""


def _library_kernels(mod) -> None:
    # The attention kernels (lib/attn.c) and the helper thread (lib/helper.c) live in the
    # fast path's own library, which the extension does not link: handed over by address.
    import ctypes

    from . import blas as _blas

    lib = _blas.native_library()
    if lib is None:
        return
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    mod.set_attention_kernels(
        address(lib.mlxnb_decode_attention), address(lib.mlxnb_causal_attention)
    )
    _state["attention"] = True
    count = ctypes.addressof(ctypes.c_int.in_dll(lib, "mlxnb_thread_count"))
    helper = (lib.mlxnb_helper_run, lib.mlxnb_helper_runs, lib.mlxnb_helper_hold)
    mod.set_helper(*map(address, helper), count)


def attention():
    """The extension when it can compute attention (its kernels are set), else None."""
    return _state["module"] if _state.get("attention") else None


def loaded():
    """The extension module when it is loaded already, else None (never builds it)."""
    return _state["module"]


def status() -> str:
    """One line: whether the extension's kernels are in use, or why not."""
    return _state["reason"]


def thread_setter():
    """``f(n)`` setting the extension's threads, or None when it is not loaded."""
    mod = _state["module"]
    return None if mod is None else mod.set_threads
