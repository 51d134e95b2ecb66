import os
import shutil
from pathlib import Path

import nbformat
import pytest

from .lab import (
    CHROMIUM,
    browser,
    dismiss_news,
    keep_no_kernel,
    kernel_idle,
    lab_server,
    notebook,
    step,
)


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


DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def artifacts(tmp_path):
    """Screenshot folder. After the test its views' screenshots go to the documentation
    (docs/screenshots: they stay current), and everything, failures included, to
    $MLX_NOTEBOOK_ARTIFACTS when set."""
    shots = tmp_path / "screenshots"
    shots.mkdir()
    yield shots
    for f in shots.iterdir():
        if not f.name.startswith("failure-"):
            shutil.copy2(f, DOCS_SHOTS / f.name)
    dest = os.environ.get("MLX_NOTEBOOK_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        for f in shots.iterdir():
            shutil.copy2(f, Path(dest) / f.name)


@pytest.fixture
def lab(request, tmp_path, tiny_dir, chromium, artifacts):
    """``lab(cells)`` opens a notebook of those cells in JupyterLab (``app="notebook"``:
    in Notebook 7); yields the page."""
    ctx = {}

    def start(cells, kernel=True, prepare=None, app="jupyterlab"):
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        if prepare is not None:
            prepare(root)
        else:
            notebook(root / "demo.ipynb", tiny_dir, [c.replace("{tiny}", tiny_dir) for c in cells])
        ctx["server"] = lab_server(root, app=app)
        base, token = ctx["server"].__enter__()
        ctx["browser"] = browser()
        b = ctx["browser"].__enter__()
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        page.requests = []
        page.on("request", lambda r: page.requests.append(r.url))
        path = "lab/tree" if app == "jupyterlab" else "notebooks"  # Notebook 7: one document
        page.goto(f"{base}/{path}/demo.ipynb?token={token}")
        n = len(nbformat.read(root / "demo.ipynb", as_version=4).cells)
        step("open the notebook", lambda: page.locator(".jp-Notebook .jp-Cell").count() == n, 90)
        if kernel:
            step("kernel ready", lambda: kernel_idle(page), 90)
        else:  # Lab asks which kernel to use, sometimes late: keep none
            keep_no_kernel(page)
        dismiss_news(page)
        ctx["page"] = page
        return page

    yield start
    rep = getattr(request.node, "rep_call", None)
    if "page" in ctx and rep is not None and rep.failed:
        ctx["page"].screenshot(path=str(artifacts / f"failure-{request.node.name}.png"))
    if "browser" in ctx:
        ctx["browser"].__exit__(None, None, None)
    if "server" in ctx:
        ctx["server"].__exit__(None, None, None)
