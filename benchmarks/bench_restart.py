"""The first chat turn after a kernel restart against a warm turn, on a long system prompt.

Usage:
    python benchmarks/bench_restart.py [--rounds 3] [--tokens 2000]

Each round uses a fresh result-cache folder. Process one (the kernel before a restart)
answers one question over a system prompt of about ``--tokens`` tokens of the default
model (the start of ``docs/performance-log.md``), which saves the prompt's KV state on
disk. Process two (after the restart) asks another question over the same system
prompt, then a third in the same process: its first turn loads the saved state and
prefills only the question, its second finds the state in memory. A third process,
with the cache off, shows the first turn without a saved state. Printed: the turns'
TTFT per round and the ratio restart / warm, median and range over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TURNS = r"""
import json, sys
from mlx_notebook.engine import Engine, Request
from mlx_notebook.engine.replay.results import Replays
path, system, questions = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3:]
eng = Engine(results=Replays("off" if path == "off" else "deterministic", path))
out = []
for q in questions:
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": q}]
    r = eng.submit(Request(msgs, max_tokens=8, temperature=0)).result()
    out.append({"ttft": r.stats.ttft_s, "cached": r.stats.cached_tokens,
                "prompt": r.stats.prompt_tokens})
print(json.dumps(out))
eng.close()
"""


def run(path: Path, system: Path, *questions: str) -> list[dict]:
    res = subprocess.run(
        [sys.executable, "-c", TURNS, str(path), str(system), *questions],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(res.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2000)
    args = ap.parse_args()
    text = (ROOT / "docs" / "performance-log.md").read_text()
    ratios = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            system = Path(tmp) / "system.txt"
            system.write_text(text[: args.tokens * 4])  # about 4 characters a token
            path = Path(tmp) / ".mlx_notebook" / "cache.sqlite"
            run(path, system, "What is this about?")  # before the restart
            restart, warm = run(path, system, "Name one figure.", "Name another figure.")
            (cold,) = run(Path("off"), system, "Name one figure.")  # no saved state
            ratios.append(restart["ttft"] / warm["ttft"])
            print(
                f"round {r + 1}: restart TTFT {restart['ttft']:.3f} s "
                f"({restart['cached']}/{restart['prompt']} tokens cached), warm "
                f"{warm['ttft']:.3f} s ({warm['cached']}/{warm['prompt']}), "
                f"ratio {ratios[-1]:.2f}; without the saved state {cold['ttft']:.2f} s",
                flush=True,
            )
    print(
        f"restart / warm TTFT: median {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {len(ratios)} rounds"
    )


if __name__ == "__main__":
    os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "deterministic")
    main()
