"""A JupyterLab server on loopback and a headless Debian Chromium, always torn down."""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat

CHROMIUM = os.environ.get("MLX_NOTEBOOK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
]


class StepTimeout(AssertionError):
    """A named end-to-end step did not finish in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def lab_server(root: Path, timeout: float = 120, app: str = "jupyterlab"):
    """Start JupyterLab (or Notebook 7: ``app="notebook"``) on a free loopback port with
    a token; yield its base URL."""
    token = secrets.token_hex(16)
    state = root.parent / (root.name + "-jupyter")
    state.mkdir(exist_ok=True)
    port = free_port()
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(state / "runtime"),
        JUPYTER_CONFIG_DIR=str(state / "config"),
        JUPYTER_DATA_DIR=str(state / "data"),  # notebook signatures (trust) live here
        HF_HUB_OFFLINE="1",
    )
    cls = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
    cmd = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--{cls}.workspaces_dir={state / 'workspaces'}",
        f"--{cls}.user_settings_dir={state / 'settings'}",
        "--ServerApp.allow_root=True",
        f"--{cls}.expose_app_in_browser=True",  # tests switch the theme through its commands
    ]
    if app == "jupyterlab":
        cmd += [
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
    proc, log = spawn(cmd, env, state / "server.log", "JupyterLab",
                      f"http://127.0.0.1:{port}/api/status?token={token}", timeout)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        yield base, token
    finally:
        _kill_group(proc)
        for pid in leftovers(state):  # kernels run in sessions of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        shutil.rmtree(state / "runtime", ignore_errors=True)


def spawn(cmd, env, log_path: Path, name: str, ready_url: str, timeout: float):
    """Start a server in a session of its own; return ``(proc, log)`` once ``ready_url``
    answers (its log, if it exits first)."""
    log = open(log_path, "w")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            log.close()
            raise RuntimeError(f"{name} exited early; log:\n{log_path.read_text()}")
        try:
            urllib.request.urlopen(ready_url, timeout=2)
            return proc, log
        except OSError:
            if time.monotonic() > deadline:
                _kill_group(proc)
                log.close()
                raise StepTimeout(f"step 'start {name}' stalled after {timeout} s") from None
            time.sleep(0.3)


def leftovers(marker) -> list[int]:
    """PIDs of live processes whose command line mentions ``marker`` (a private dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if str(marker) in cmd and ") Z " not in stat:
            found.append(int(entry.name))
    return found


def _kill_group(proc):
    # The server and its kernels share the session we started: end them all.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextmanager
def browser():
    """Headless Debian Chromium driven by Playwright (no Playwright browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


def step(name: str, fn, timeout: float = 30, interval: float = 0.2, describe=None):
    """Poll ``fn`` until truthy; fail naming the step that stalled.

    ``describe()``, when given, says at a stall what the page showed (cell prompts,
    say): a stall seen once in CI is then a lead, not a bare timeout.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            out = fn()
            if out:
                return out
        except Exception as exc:  # the page may be mid-render
            last = exc
        time.sleep(interval)
    seen = ""
    if describe is not None:
        try:
            seen = f"; the page showed: {describe()}"
        except Exception as exc:  # noqa: BLE001 - the description must not hide the stall
            seen = f"; describing the page failed: {exc!r}"
    raise StepTimeout(
        f"step '{name}' stalled after {timeout} s" + (f" ({last})" if last else "") + seen
    )


CONTRAST_JS = """
(sel) => {
  const parse = (s) => {
    let m = s.match(/rgba?\\(([^)]+)\\)/);
    if (m) {
      const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
      return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
    }
    m = s.match(/color\\(srgb ([^)]+)\\)/);
    if (m) {
      const p = m[1].split(/[ \\/]+/).filter(Boolean).map(Number);
      return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1];
    }
    return null;
  };
  const over = (t, b) => [0, 1, 2].map((i) => t[i] * t[3] + b[i] * (1 - t[3])).concat([1]);
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let acc = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) acc = over(layers[i], acc);
    return acc;
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  return Array.from(document.querySelectorAll(sel)).map((el) => {
    const cs = getComputedStyle(el);
    const bg = background(el);
    const fg = over(parse(el instanceof SVGElement ? cs.fill : cs.color), bg);
    const a = lum(fg), b = lum(bg);
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  });
}
"""


BROKEN_WORDS_JS = """
(sel) => {
  const broken = [];
  for (const el of document.querySelectorAll(sel)) {
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(x => x.width > 0)
          .map(x => Math.round(x.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}
"""


def broken_words(page, selector: str) -> list[str]:
    """Words (runs without spaces) whose text is laid out over more than one line."""
    return page.evaluate(BROKEN_WORDS_JS, selector)


def contrasts(page, selector: str) -> list[float]:
    """WCAG contrast ratio of each element's text against its composited background."""
    return page.evaluate(CONTRAST_JS, selector)


def set_theme(page, name: str) -> None:
    """Switch JupyterLab's theme (e.g. "JupyterLab Dark") through its own command."""
    page.evaluate(
        "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name
    )
    step(
        f"theme {name}",
        lambda: page.evaluate("() => document.body.dataset.jpThemeName") == name,
        30,
    )


KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def notebook(path, tiny_dir, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    cells = ["%load_ext mlx_notebook\nTINY = " + repr(tiny_dir), *cells]
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)


KERNEL_STATUS_JS = """
() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return k ? k.status : null;
}
"""


def kernel_idle(page) -> bool:
    """Whether the open notebook's kernel is up and idle, answering Lab's kernel choice.

    Lab asks "Select Kernel" when its first start of the notebook's kernel fails or
    comes before the kernel list (seen once in CI on a busy machine); a user then takes
    the preferred kernel it offers, and so does this. The toolbar's status indicator is
    no evidence: it reads idle while no kernel exists.
    """
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and "Select Kernel" in dialog.first.inner_text():
        dialog.first.locator(".jp-Dialog-button.jp-mod-accept").click()
    return page.evaluate(KERNEL_STATUS_JS) == "idle"


def keep_no_kernel(page) -> None:
    """Answer Lab's "Select Kernel" with No Kernel whenever it asks, before any action.

    On a busy machine Lab asks late, after the notebook has rendered (seen in CI: the
    dialog then took a hover meant for a token); Playwright runs this handler whenever
    the dialog stands in the way of an action.
    """
    dialog = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
    page.add_locator_handler(dialog, lambda d: d.get_by_role("button", name="No Kernel").click())


def run_cell(page, i, tries=4):
    """Run cell ``i`` the way a user does; retry if the keypress was lost while Lab settled."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(i)
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text().strip()
    dialog = page.locator(".jp-Dialog")
    for _ in range(tries):
        if dialog.count() and dialog.first.is_visible():  # say what Lab asks, not "timeout"
            raise AssertionError(f"run cell {i}: Lab shows a dialog: {dialog.first.inner_text()!r}")
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")
        try:
            step(f"cell {i} starts", lambda: prompt.inner_text().strip() != before, 5)
            return cell
        except AssertionError:
            continue
    raise AssertionError(f"step 'run cell {i}' stalled: the cell never started")


def run_prints(page, i, text, timeout=30):
    """Run cell ``i`` and wait until its output reads ``text`` (the kernel is free again)."""
    cell = run_cell(page, i)
    step(
        f"cell {i} prints {text}",
        lambda: cell.locator(".jp-OutputArea-output").inner_text().strip() == text,
        timeout,
    )


def run_done(page, i, timeout=60):
    """Run cell ``i`` and wait until its prompt shows an execution count."""
    cell = run_cell(page, i)
    step(
        f"cell {i} finished",
        lambda: cell.locator(".jp-InputPrompt").inner_text().strip() not in ("[ ]:", "[*]:", ""),
        timeout,
    )
    return cell


def prompts(page, upto: int) -> str:
    """Cells ``0..upto``'s execution prompts, e.g. ``0 [1]: 1 [*]: 2 [ ]:``."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    return " ".join(
        f"{i} {cells.nth(i).locator('.jp-InputPrompt').inner_text().strip()}"
        for i in range(upto + 1)
    )


def run_all(page, tries=3):
    """Run All Cells from the Run menu; retry if Lab dropped the click while it settled."""
    first = page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-InputPrompt")
    for _ in range(tries):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            step("Run All starts", lambda: first.inner_text().strip() not in ("[ ]:", ""), 10)
            return
        except StepTimeout:
            page.keyboard.press("Escape")  # close the menu if it stayed open
    raise StepTimeout(f"step 'Run All starts' stalled after {tries} tries")


def dismiss_news(page):
    # JupyterLab's first-run "get notified about news?" toast covers part of the page.
    try:
        page.get_by_role("button", name="No", exact=True).click(timeout=3000)
    except Exception:
        pass


def state_word(scope):
    return scope.locator(".mlxnb .state").first.inner_text()


def themed(lab, cells, theme, app="jupyterlab"):
    """Open ``cells`` in ``theme``: the page, the theme's slug, and ``out(i)``."""
    page = lab(cells, app=app)
    set_theme(page, theme)
    located = page.locator(".jp-Notebook .jp-Cell")

    def out(i):  # Lab renders cells lazily: bring it on screen first
        located.nth(i).scroll_into_view_if_needed()
        return located.nth(i).locator(".jp-OutputArea")

    return page, theme.split()[-1].lower(), out


# A cell registering "dreamer": a scripted reasoning model that thinks " flow flow ..."
# until told to stop (its end-of-thinking marker), then answers " Paris".
DREAMER = (
    "import tempfile\nfrom pathlib import Path\nfrom mlx_lm.utils import load_tokenizer\n"
    "from mlx_notebook import Engine\n"
    "from mlx_notebook.testing import ScriptedModel, build_tokenizer\n"
    "d = Path(tempfile.mkdtemp()); build_tokenizer(d, thinking=True); tok = load_tokenizer(d)\n"
    "ids = lambda t: tok.encode(t, add_special_tokens=False)\n"
    "start, end, eos = (tok.convert_tokens_to_ids(t) for t in ('<think>', '</think>', "
    "'<|im_end|>'))\n"
    "flow, ans = ids(' flow'), ids(' Paris')\n"
    "nxt = {start: flow[0], **dict(zip(flow, flow[1:])), flow[-1]: flow[0], end: ans[0], "
    "**dict(zip(ans, ans[1:])), ans[-1]: eos}\n"
    "Engine.default().register_model('dreamer', ScriptedModel(len(tok.get_vocab()), "
    "lambda pos, t: nxt.get(t, eos), delay_s=0.02), tok)\n'registered'"
)
