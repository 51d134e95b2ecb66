"""The control panel: generation settings, Generate / Stop / Compare / Sweep k, history.

One anywidget (``panel.js``): the settings are synced traits, the buttons' clicks
come back as messages, and the current run's view is drawn in the panel itself
from the deltas its `LiveView` sends (`LiveWidget.restart` for each new run), so
it needs no widget inside another (marimo has none).

Compare and Sweep run through `mlx_notebook.measure`, the same code as
``mlx_notebook.compare``/``sweep`` and ``%%generate --compare``, with the
sampling the panel shows (`Panel.measured_request`). Displayed, the
panel is followed by a static snapshot of its last state (`document.Snapshot`),
which is what a saved notebook shows once the kernel is gone.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

from traitlets import Bool, Enum, Float, Int, List, Unicode, observe

from ...engine.backend import Backend, Route, backend_for
from ...engine.job import Job, Result
from ...engine.request import DEFAULT_MAX_TOKENS, Request
from ...measure.compare import CompareResult, Comparison
from ...measure.sweep import SweepResult
from ..live.widget import LiveWidget
from ..magics.options import unescape
from ..measure_views.charts import history_row, history_text
from ..measure_views.compare import CompareRun
from ..measure_views.sweep import SweepRun
from ..views.document import Snapshot
from ..views.render import ViewState, escape
from ..views.view import LiveView, generation_view
from .controls import PanelControls
from .snapshot import history_html, snapshot_html

_recent: list[str] = []
_HERE = Path(__file__).parent
_LIVE = _HERE.parent / "live"


class Panel(PanelControls, LiveWidget):
    """Widget panel for generation and speculative decoding.

    Every setting is a trait, so ``panel.num_draft_tokens = 5`` works from code
    and moves the slider too. Actions run on the engine's worker; the panel only
    submits jobs and renders their events. ``panel.click("compare")`` is what a
    click on Compare does.
    """

    _esm = (
        "".join((_LIVE / f).read_text() for f in ("copy.js", "button.js"))
        + (_HERE / "panel.js").read_text()
    )
    _css = LiveWidget._css + (_HERE / "panel.css").read_text()

    prompt = Unicode("", help="The prompt (user message in chat mode).").tag(sync=True, click=True)
    system = Unicode("", help="Optional system prompt.").tag(sync=True, click=True)
    model = Unicode("default", help="Main model spec.").tag(sync=True, click=True)
    draft_source = Enum(
        ["none", "lookup", "suffix", "model"], "none", help="Where drafts come from."
    ).tag(sync=True, click=True)
    draft_model = Unicode("", help="Draft model spec when draft_source == 'model'.").tag(
        sync=True, click=True
    )
    lookup_ngram = Int(3, help="n-gram size for prompt lookup (1-8).").tag(sync=True, click=True)
    num_draft_tokens = Int(3, help="Draft tokens per speculative step (1-16).").tag(
        sync=True, click=True
    )
    model_sampling = Bool(
        True, help="Sample as the model's own defaults say (setting temperature or top_p ends it)."
    ).tag(sync=True, click=True)
    temperature = Float(0.0, help="Sampling temperature; 0 is greedy.").tag(sync=True, click=True)
    top_p = Float(1.0, help="Nucleus sampling threshold in (0, 1].").tag(sync=True, click=True)
    max_tokens = Int(DEFAULT_MAX_TOKENS, help="Most tokens to generate.").tag(sync=True, click=True)
    seed = Int(0, min=0, help="Random seed, >= 0 (the same seed gives the same text).").tag(
        sync=True, click=True
    )
    stop_strings = Unicode("", help="Stop strings, one per line (\\n and \\t understood).").tag(
        sync=True, click=True
    )
    chat = Bool(True, help="Apply the chat template.").tag(sync=True, click=True)
    inspect = Bool(
        False, help="Record each token's probability and show the text tinted by it."
    ).tag(sync=True, click=True)
    sweep_from = Int(1, help="First k of a sweep.").tag(sync=True, click=True)
    sweep_to = Int(8, help="Last k of a sweep.").tag(sync=True, click=True)
    repeats = Int(
        3, min=1, help="Runs per k in Sweep (Compare runs until its answer is clear)."
    ).tag(sync=True, click=True)
    max_pairs = Int(20, min=2, help="Most pairs a Compare runs before it says 'undecided'.").tag(
        sync=True
    )
    budget_s = Float(60.0, help="Most seconds a Compare runs before it says 'undecided'.").tag(
        sync=True
    )
    metric = Enum(
        ["e2e", "decode"], "e2e", help="What the verdict uses: end to end (prefill in) or decode."
    ).tag(sync=True, click=True)
    running = Bool(False, help="Whether an action is running.").tag(sync=True)
    server_url = Unicode(
        "", help="An OpenAI-compatible server for model specs that are not URLs; empty: local."
    ).tag(sync=True)
    model_options = List(Unicode(), help="Model specs offered: default, loaded, recent.").tag(
        sync=True
    )
    sampling_hint = Unicode("", help="The model's own sampling, as HTML text.").tag(sync=True)
    estimate = Unicode("", help="How many runs a sweep makes and how long.").tag(sync=True)
    status = Unicode("", help="An error from the last action (HTML, escaped).").tag(sync=True)
    history_html = Unicode("", help="The run history table (HTML, escaped).").tag(sync=True)
    kind = Unicode("panel", help="What the widget is, for tests and styles.").tag(sync=True)

    def __init__(self, engine: Backend | None = None, refresh_hz: float = 20, **traits):
        self._fixed = engine
        self.refresh_hz = refresh_hz
        self.history: list[dict] = []
        self._action = ("", 0)  # the current action's kind and number, for the history
        self._count: dict[str, int] = {}  # actions of each kind so far: "sweep 1" is the first
        self._by_hand = False
        self.last_result = None
        self._active: list[Job] = []
        self._view: LiveView | None = None
        self._finished = threading.Event()
        self._finished.set()
        self.snapshot = Snapshot()
        super().__init__([], can_stop=False, **traits)
        self.model_options = self._model_options()
        self._link_controls()
        if {"temperature", "top_p"} & set(traits) and "model_sampling" not in traits:
            self._custom_sampling(None)  # Panel(temperature=0.7) samples at 0.7
        self._sync_enabled()
        self._show_sampling()
        self._show_estimate()

    def _ipython_display_(self) -> None:
        # The live widget, then its snapshot: a saved notebook shows the snapshot.
        self.snapshot.show(self, snapshot_html(self), self._plain())

    def _plain(self) -> str:
        return f"mlx_notebook Panel, model {self.model}\n" + history_text(self.history)

    def _save_snapshot(self) -> None:
        self.snapshot.update(snapshot_html(self), self._plain())

    def route(self) -> Route:
        """Where the current model's requests go (a backend passed in wins)."""
        model = self.model or "default"
        if self._fixed is not None:
            return Route(self._fixed, model)
        return backend_for(model, self.server_url or None)

    @property
    def engine(self) -> Backend:
        """The backend for the current model."""
        return self.route().backend

    @observe("model", "draft_model")
    def _remember(self, change) -> None:
        v = change["new"]
        if v and v not in _recent:
            _recent.append(v)

    def _model_options(self) -> list[str]:
        loaded = [m.name for m in self.engine.info().models]
        return list(dict.fromkeys(["default", *loaded, *_recent]))

    # -- requests -----------------------------------------------------------
    def request(self) -> Request:
        """The Request the current settings describe (validated).

        Raises:
            ValueError: A setting is invalid (the message names it).
        """
        draft = self.draft_model or None if self.draft_source == "model" else None
        req = Request(
            prompt=self.prompt,
            model=self.route().model,
            system=self.system or None,
            chat=self.chat,
            max_tokens=self.max_tokens,
            temperature=None if self.model_sampling else self.temperature,
            top_p=None if self.model_sampling else self.top_p,
            seed=self.seed,
            stop=[unescape(s) for s in self.stop_strings.splitlines() if s],
            draft=draft,
            draft_kind=self.draft_source,
            num_draft_tokens=self.num_draft_tokens,
            lookup_ngram=self.lookup_ngram,
            logprobs=5 if self.inspect else None,
        )
        if self.draft_source == "model" and not self.draft_model:
            raise ValueError("draft_model: choose a draft model, or another draft source")
        req.validate()
        return req

    def measured_request(self) -> Request:
        """The `request` Compare and Sweep run: the sampling shown, made explicit.

        Measured runs take an unset temperature as greedy (`measure.runs.timed_spec`),
        not as the model's own sampling; with "the model's own sampling" ticked,
        the temperature it has is set, so they sample as the panel says (every
        run with the panel's seed). The other fields stay unset: the model's.
        """
        req = self.request()
        if req.temperature is not None:
            return req
        from ...engine.defaults import in_force

        route = self.route()
        values = in_force(req, route.backend.sampling_defaults(route.model))
        return replace(req, temperature=values["temperature"])

    def _begin(self, kind: str):
        if self.running:
            return None
        try:
            req = self.request() if kind == "generate" else self.measured_request()
            self.engine.check(req)  # draft vocabulary and context too, before running
        except Exception as exc:
            self._show_error(exc)
            return None
        self.status = ""  # the run's own view says what it is doing
        self._count[kind] = self._count.get(kind, 0) + 1
        self._action = (kind, self._count[kind])
        self._finished.clear()
        self.running = True
        return req

    def _show_error(self, exc: BaseException) -> None:
        self.status = f'<div class="mlxnb"><div class="err">{escape(str(exc))}</div></div>'

    def _fail(self, exc: BaseException) -> None:
        # A submit that failed after _begin: cancel what did start, stay usable. It
        # recorded no run, so the next action of its kind takes its number.
        kind, n = self._action
        self._count[kind] = n - 1
        self._action = ("", 0)  # its view's late on_done finds it is no longer current
        for j in list(self._active):
            j.cancel()
        self._active = []
        self._show_error(exc)
        self.running = False
        self._finished.set()

    def _end(self) -> None:
        # Runs on a view's refresh thread: only widget traits are touched.
        self._show_history()
        self._show_estimate()  # now timed from this run too
        self._save_snapshot()
        self.model_options = self._model_options()  # newly loaded models and recent specs
        self.running = False
        self._finished.set()

    def _show_history(self) -> None:
        self.history_html = history_html(self.history)

    # -- actions ------------------------------------------------------------
    def generate(self) -> None:
        """Run the current settings once (speculative if a draft source is set)."""
        req = self._begin("generate")
        if req is None:
            return
        try:
            job = self.engine.submit(req)
        except Exception as exc:
            self._fail(exc)
            return
        self._active = [job]

        def done() -> None:
            res = job.result(raise_on_error=False)
            self.last_result = res
            self._record(req, res, req.mode)
            self._end()

        state = ViewState(
            model=req.model, mode=req.mode, k=req.num_draft_tokens, fmt="markdown",
            inspect=self.inspect,
        )  # fmt: skip
        view = generation_view(state, self.refresh_hz, on_done=done, live=self)
        self._show(view)  # before attach: a quick job's done() snapshots this view
        view.attach(job)

    def compare(self) -> None:
        """Normal and speculative decoding in interleaved pairs, until the answer is clear."""
        req = self._begin("compare")
        if req is None:
            return

        action = self._action  # a start that fails ends it, and its late on_done is ignored

        def done(res: CompareResult) -> None:
            if self._action is not action:
                return
            self.last_result = res
            for _, role, r in res.runs:
                self._record(req, r, "normal" if role == "normal" else req.mode)
            self._end()

        try:  # (a request Compare cannot measure is refused here, after _begin)
            comparison = Comparison(
                self.engine, req, None, self.metric, max_pairs=self.max_pairs,
                budget_s=self.budget_s,
            )  # fmt: skip
            run = CompareRun(comparison, self.refresh_hz, on_done=done, live=self)
        except Exception as exc:
            self._fail(exc)
            return
        self._run(run)

    def sweep(self) -> None:
        """Speculative decoding at each k of the range, repeated, against normal decoding."""
        req = self._begin("sweep")
        if req is None:
            return
        ks = range(self.sweep_from, self.sweep_to + 1)

        action = self._action  # a start that fails ends it, and its late on_done is ignored

        def done(res: SweepResult) -> None:
            if self._action is not action:
                return
            self.last_result = res
            for k, r in res.runs:
                if r is not None:
                    self._record(req, r, "normal" if k is None else req.mode, k)
            self._end()

        try:
            run = SweepRun(
                self.engine, req, ks, self.repeats, self.metric, self.refresh_hz, on_done=done,
                live=self,
            )  # fmt: skip
        except Exception as exc:
            self._fail(exc)
            return
        self._run(run)

    def _run(self, run) -> None:
        self._show(run.view)  # before start: a quick run's done() snapshots this view
        try:
            run.start()
        except Exception as exc:
            self._fail(exc)
            return
        self._active = run.jobs  # the run's own list: a Compare adds pairs as it goes

    def stop(self) -> None:
        """Cancel the running action; whatever finished is kept."""
        if self._view is not None:
            self._view.stop()
        for j in list(self._active):
            j.cancel()

    def wait(self, timeout: float | None = None):
        """Block until the current action ends; return its result."""
        if not self._finished.wait(timeout):
            raise TimeoutError("panel action still running")
        return self.last_result

    def clear_history(self) -> None:
        """Forget the run history; the next action of each kind is number 1 again."""
        self.history.clear()
        kind, n = self._action
        self._count = {kind: n} if self.running else {}  # a running action keeps its number
        self._show_history()
        self._save_snapshot()

    def history_text(self) -> str:
        """The run history as plain text."""
        return history_text(self.history)

    def _show(self, view: LiveView) -> None:
        # The view draws in this widget (it replaced the last one, chart and all);
        # its Stop is the panel's, which also cancels what the view does not follow.
        self._view = view
        self.on_click("stop", self.stop)

    def _record(self, req: Request, res: Result, mode: str, k: int | None = None) -> None:
        kind, n = self._action
        row = history_row(req, res, mode, k)
        row.update(run=len(self.history) + 1, action=f"{kind} {n}", model=req.model)
        self.history.append(row)
