#!/usr/bin/env bash
# The C kernels' tests under the compiler's sanitizers: the fast path's native library
# and MLX extension are built again with AddressSanitizer and UndefinedBehaviorSanitizer
# (an out-of-bounds read or write, a use after free, an overflow or a misaligned access
# stops the run), into a cache folder of their own, and the kernel tests run on them; then
# helper.c's thread pool under ThreadSanitizer. Python and MLX are not instrumented, so
# the runtimes are preloaded. Extra arguments go to pytest. Needs gcc (its libasan,
# libubsan and libtsan); run scripts/setup.sh test first.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
py=.venv/bin/python
# lib NAME: the path of gcc's sanitizer runtime NAME; stops the run where gcc has none.
lib() {
    local path
    path="$(gcc -print-file-name="$1")"
    [ -f "$path" ] || { echo "sanitize: gcc has no $1 (install gcc)" >&2; exit 1; }
    echo "$path"
}
# Python's own allocations look like leaks to ASan; a finding stops the run (its report
# goes to stderr: pytest captures only Python's output, --capture=sys).
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1

# sanitizer NAME PRELOAD FLAGS...: compiler wrappers adding FLAGS and a cache folder for
# them; the library and extension built there with nothing loaded (an instrumented
# library cannot load without its runtime, and gcc fails with libtsan preloaded), then
# loaded with the runtime PRELOAD first. A build or load that fails stops the run: the
# tests would skip or fall back to MLX's own kernels, and find nothing.
sanitizer() {
    local name="$1" preload="$2"
    shift 2
    mkdir -p "$work/$name"
    printf '#!/bin/sh\nexec gcc %s "$@"\n' "$*" >"$work/$name/cc"
    printf '#!/bin/sh\nexec g++ %s "$@"\n' "$*" >"$work/$name/cxx"
    chmod +x "$work/$name/cc" "$work/$name/cxx"
    export CC="$work/$name/cc" CXX="$work/$name/cxx" MLX_NOTEBOOK_CACHE="$work/$name/cache"
    MLX_NOTEBOOK_FAST=0 "$py" -c "from mlx_notebook.cpu.__main__ import build_all; \
built = build_all(); assert None not in [p for _, p, _ in built], built"
    LD_PRELOAD="$preload" "$py" -c "import mlx_notebook, mlx_notebook.cpu.ext as e; e.load(); \
s = mlx_notebook.cpu.blas.status()['gemv_reason'], e.status(); print('$name:', *s, sep=' | '); \
assert mlx_notebook.cpu.blas.native_library() and e.loaded(), 'not loaded'"
}

asan="$(lib libasan.so)"  # one runtime per assignment: set -e sees each failure
ubsan="$(lib libubsan.so)"
asan="$asan $ubsan"
sanitizer asan "$asan" -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer -g
LD_PRELOAD="$asan" "$py" -m pytest -q -p no:cacheprovider --capture=sys \
    tests/cpu/test_ext.py tests/cpu/test_blas.py tests/cpu/test_helper.py tests/cpu/test_qmm_amx.py \
    tests/cpu/test_layer.py tests/cpu/test_attention.py tests/cpu/test_sampling.py \
    tests/cpu/test_pages.py tests/cpu/test_quant.py tests/cpu/test_fast.py \
    tests/test_families.py -m "not families" "$@"  # the curated families: CI time

# Only the helper's own tests: elsewhere OpenMP's and MLX's threads synchronize in code
# ThreadSanitizer cannot see, and their reports are false. A forked child may not start
# threads under it, so that test is left out.
# MLX's own threads (not instrumented) call pthread functions it would misread as races.
export TSAN_OPTIONS=halt_on_error=1:exitcode=66:ignore_noninstrumented_modules=1
tsan="$(lib libtsan.so)"
sanitizer tsan "$tsan" -fsanitize=thread -g
LD_PRELOAD="$tsan" "$py" -m pytest -q -p no:cacheprovider --capture=sys tests/cpu/test_helper.py \
    --deselect tests/cpu/test_helper.py::test_a_forked_child_has_a_helper_of_its_own "$@"
