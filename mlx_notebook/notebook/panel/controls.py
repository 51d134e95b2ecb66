"""The Panel's controls: shown only where they apply, disabled with a reason.

The form itself is drawn by ``panel.js`` from the Panel's traits; this mixin
decides what it shows. A control that cannot matter for the current settings
is hidden (the draft model field unless drafts come from a model, the n-gram
slider unless from prompt lookup, the measuring settings without a draft
source, temperature and top-p while the model's own sampling is on). A button
that cannot act now stays in place, looks disabled, and its hover text says why.

Also what the sampling controls say and do: the model's own sampling as a hint,
unticking it starts the sliders from the values in force, and a value set by
hand unticks it.
"""

from __future__ import annotations

from traitlets import Dict, HasTraits, List, Unicode

from .snapshot import estimate_text, sampling_text

WHY_RUNNING = "a run is in progress: press Stop first"
WHY_NO_DRAFTS = "choose a draft source (prompt lookup, suffix or draft model) to measure it"
BUTTONS = ("generate", "stop", "compare", "sweep", "clear")
TIPS = {
    "generate": "Run the settings once",
    "stop": "Stop the run",
    "compare": "Normal against speculative decoding, until clear",
    "sweep": "Speculative decoding at each k of the range",
    "clear": "Forget the run history",
}


class PanelControls(HasTraits):
    """Mixin for `Panel`: which controls show, which buttons act, and why not."""

    hidden = List(
        Unicode(), help="Groups of controls not shown (draft_row, draft_model, ...)."
    ).tag(sync=True)
    off = List(Unicode(), help="Buttons that cannot act now (shown disabled).").tag(sync=True)
    tips = Dict(help="Each button's hover text; a disabled one's says why.").tag(sync=True)

    def _link_controls(self) -> None:
        for name, action in (
            ("generate", self.generate),
            ("stop", self.stop),
            ("compare", self.compare),
            ("sweep", self.sweep),
            ("clear", self.clear_history),
        ):
            # A click the page sent before it drew the button disabled does nothing.
            self.on_click(name, lambda name=name, action=action: name in self.off or action())
        self.observe(self._bounds_changed, names=["sweep_from", "sweep_to"])
        self.observe(
            lambda _c: self._sync_enabled(), names=["running", "draft_source", "model_sampling"]
        )
        self.observe(self._custom_sampling, names=["temperature", "top_p"])
        self.observe(self._on_model_sampling, names=["model_sampling"])
        self.observe(lambda _c: self._show_sampling(), names=["model"])
        self.observe(
            lambda _c: self._show_estimate(),
            names=["model", "sweep_from", "sweep_to", "repeats", "max_tokens", "draft_source"],
        )

    def _bounds_changed(self, _change) -> None:
        # Either end may be moved past the other: the range is the two, in order.
        lo, hi = sorted((max(1, min(16, self.sweep_from)), max(1, min(16, self.sweep_to))))
        if (lo, hi) != (self.sweep_from, self.sweep_to):
            with self.hold_trait_notifications():
                self.sweep_from, self.sweep_to = lo, hi

    def _sync_enabled(self) -> None:
        """Hide, enable and explain each control for the current settings."""
        busy, source = self.running, self.draft_source
        drafts = source != "none"
        hidden = {
            "draft_row": not drafts,
            "draft_model": source != "model",
            "lookup_ngram": source != "lookup",
            "sampling_row": self.model_sampling,
            "measure_row": not drafts,
            "estimate": not drafts,
        }
        why = {
            "generate": WHY_RUNNING if busy else None,
            "compare": WHY_RUNNING if busy else None if drafts else WHY_NO_DRAFTS,
            "stop": None if busy else "nothing is running",
        }
        why["sweep"] = why["compare"]
        with self.hold_sync():
            self.hidden = [name for name, hide in hidden.items() if hide]
            self.off = [b for b in BUTTONS if why.get(b)]
            self.tips = {b: why.get(b) or TIPS[b] for b in BUTTONS}

    def _custom_sampling(self, _change) -> None:
        self._by_hand = True  # a value set by hand is meant to be used, as set
        try:
            self.model_sampling = False
        finally:
            self._by_hand = False

    def _on_model_sampling(self, change) -> None:
        if change["new"] or self._by_hand:
            return
        # The sliders start at the values in force, so unticking changes nothing.
        from ...engine.defaults import in_force
        from ...engine.request import Request

        route = self.route()
        values = in_force(Request(""), route.backend.sampling_defaults(route.model))
        with self.hold_trait_notifications():
            self.temperature, self.top_p = values["temperature"], values["top_p"]

    def _show_sampling(self) -> None:
        route = self.route()
        self.sampling_hint = sampling_text(route.backend.sampling_defaults(route.model))

    def _show_estimate(self) -> None:
        self.estimate = estimate_text(self)
