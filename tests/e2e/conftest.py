import os
import shutil
from pathlib import Path

import pytest

from .lab import CHROMIUM


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def chromium():
    if not Path(CHROMIUM).exists():
        msg = f"Chromium not found at {CHROMIUM}: install the Debian package 'chromium'"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        import playwright  # noqa: F401
    except ImportError:
        msg = "Playwright for Python is not installed (pip install playwright)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return CHROMIUM


@pytest.fixture
def artifacts(tmp_path):
    """Screenshot folder; copied to $MLX_NOTEBOOK_ARTIFACTS after the test."""
    shots = tmp_path / "screenshots"
    shots.mkdir()
    yield shots
    dest = os.environ.get("MLX_NOTEBOOK_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        for f in shots.iterdir():
            shutil.copy2(f, Path(dest) / f.name)
