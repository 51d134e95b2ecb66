#!/usr/bin/env bash
# The test suite, with $BUSY busy loops (default 0) keeping cores busy beside it: with
# one per core (make test-loaded, and CI), a test that depends on the machine's speed
# fails. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${BUSY:-0}"
pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$n"); do
    (while :; do :; done) &
    pids+=($!)
done
[ "$n" -eq 0 ] || echo "run_tests: $n busy loop(s) running beside the suite (pids ${pids[*]})"
.venv/bin/python -m pytest -q "$@"
