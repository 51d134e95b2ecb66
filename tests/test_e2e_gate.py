"""Without Chromium the browser tests skip on a laptop and fail in CI."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(ci: str):
    env = dict(os.environ, MLX_NOTEBOOK_CHROMIUM="/nonexistent/chromium", CI=ci)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "tests/e2e/test_lab.py",
            "-k",
            "torn_down",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_skips_naming_the_debian_package_off_ci():
    out = run("")
    assert out.returncode == 0, out.stdout
    assert "1 skipped" in out.stdout and "Debian package 'chromium'" in out.stdout


def test_fails_under_ci():
    out = run("true")
    assert out.returncode != 0 and "Debian package 'chromium'" in out.stdout
