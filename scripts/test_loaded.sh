#!/usr/bin/env bash
# The whole suite while busy loops keep every core busy (one per core, or $BUSY):
# a test that depends on the machine's speed fails here. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${BUSY:-$(nproc)}"
pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$n"); do
    (while :; do :; done) &
    pids+=($!)
done
echo "test-loaded: $n busy loop(s) running beside the suite (pids ${pids[*]})"
.venv/bin/python -m pytest -q "$@"
