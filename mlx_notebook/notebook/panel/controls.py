"""The Panel's controls: built once, shown only where they apply, disabled with a reason.

A control that cannot matter for the current settings is hidden (the draft model
field unless drafts come from a model, the n-gram slider unless from prompt
lookup, the measuring settings without a draft source, temperature and top-p
while the model's own sampling is on). A button that cannot act now stays in
place, looks disabled, and its hover text says why.
"""

from __future__ import annotations

import ipywidgets as widgets

from ..views.style import STYLE

LABEL = {"description_width": "92px"}  # "temperature", "draft model": whole words
TOGGLES = {"button_width": "120px"}  # "prompt lookup" whole

# Disabled buttons in JupyterLab's theme differ from enabled ones by opacity only,
# which reads as enabled on coloured buttons: grey them out too.
PANEL_CSS = (
    "<style>.mlxnb-panel .jupyter-button:disabled{opacity:.38;filter:grayscale(1);"
    "cursor:not-allowed}.mlxnb-panel .mlxnb-hint{font-size:12px;"
    "color:var(--jp-ui-font-color2,inherit)}</style>"
)

WHY_RUNNING = "a run is in progress: press Stop first"
WHY_NO_DRAFTS = "choose a draft source (prompt lookup, suffix or draft model) to measure it"


class PanelControls:
    """Mixin for `Panel`: the widgets, their layout, visibility and enabled state."""

    def _build(self) -> None:
        W = widgets
        wide = W.Layout(width="98%")

        def labelled(cls, **kw):
            return cls(style=LABEL, **kw)

        self.prompt_box = W.Textarea(
            placeholder="Prompt", layout=W.Layout(width="98%", height="90px")
        )
        self.system_box = W.Text(placeholder="System prompt (optional)", layout=wide)
        self.model_box = labelled(
            W.Combobox, options=self._model_options(), description="model", ensure_option=False
        )
        self.draft_kind = W.ToggleButtons(
            style=TOGGLES,
            options=[
                ("none", "none"),
                ("prompt lookup", "lookup"),
                ("suffix", "suffix"),
                ("draft model", "model"),
            ],
        )
        self.draft_box = labelled(
            W.Combobox, options=self._model_options(), description="draft model",
            ensure_option=False,
        )  # fmt: skip
        self.ngram_slider = labelled(W.IntSlider, min=1, max=8, description="n-gram")
        self.k_slider = labelled(W.IntSlider, min=1, max=16, description="draft k")
        self.sampling_box = W.Checkbox(description="the model's own sampling", indent=False)
        self.temp_slider = labelled(
            W.FloatSlider, min=0, max=2, step=0.05, description="temperature"
        )
        self.top_p_slider = labelled(W.FloatSlider, min=0.05, max=1, step=0.05, description="top-p")
        self.max_box = labelled(W.BoundedIntText, min=1, max=32768, description="max tokens")
        self.seed_box = labelled(W.BoundedIntText, min=0, max=2**32 - 1, description="seed")
        self.stop_box = labelled(
            W.Textarea, placeholder="Stop strings, one per line", description="stop"
        )
        self.chat_box = W.Checkbox(description="chat template", indent=False)
        self.inspect_box = W.Checkbox(description="inspect tokens", indent=False)
        self.inspect_box.tooltip = "Tint each token by its probability (hover: alternatives)"
        self.sweep_range = labelled(W.IntRangeSlider, min=1, max=16, description="sweep k")
        self.repeats_box = labelled(W.BoundedIntText, min=1, max=20, description="repeats")
        self.metric_box = W.ToggleButtons(
            options=[("end to end", "e2e"), ("decode", "decode")], style=TOGGLES,
        )  # fmt: skip
        self.generate_button = W.Button(description="Generate", icon="play", button_style="primary")
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger")
        self.compare_button = W.Button(description="Compare", icon="columns", button_style="info")
        self.sweep_button = W.Button(description="Sweep k", icon="line-chart")
        self.clear_button = W.Button(description="Clear history", icon="trash")
        self.sampling_hint = W.HTML()
        self.sampling_hint.add_class("mlxnb-hint")
        self.estimate = W.HTML()
        self.estimate.add_class("mlxnb-hint")
        self.status = W.HTML()
        self.output = W.VBox()
        self.history_html = W.HTML()
        self._css = W.HTML(STYLE + PANEL_CSS)
        pairs = [
            ("prompt", self.prompt_box),
            ("system", self.system_box),
            ("model", self.model_box),
            ("draft_source", self.draft_kind),
            ("draft_model", self.draft_box),
            ("lookup_ngram", self.ngram_slider),
            ("num_draft_tokens", self.k_slider),
            ("model_sampling", self.sampling_box),
            ("temperature", self.temp_slider),
            ("top_p", self.top_p_slider),
            ("max_tokens", self.max_box),
            ("seed", self.seed_box),
            ("stop_strings", self.stop_box),
            ("chat", self.chat_box),
            ("inspect", self.inspect_box),
            ("repeats", self.repeats_box),
            ("metric", self.metric_box),
        ]
        self._inputs = [w for _, w in pairs] + [self.sweep_range]
        self._pairs = pairs
        self.generate_button.on_click(lambda _b: self.generate())
        self.stop_button.on_click(lambda _b: self.stop())
        self.compare_button.on_click(lambda _b: self.compare())
        self.sweep_button.on_click(lambda _b: self.sweep())
        self.clear_button.on_click(lambda _b: self.clear_history())

    def _layout(self) -> list:
        W = widgets

        def label(text: str):
            # A ToggleButtons' own description wraps above its buttons: a fixed label
            # beside them lines up with the other controls' labels.
            return W.Label(text, layout=W.Layout(width="96px", justify_content="flex-end",
                                                 padding="0 8px 0 0"))  # fmt: skip

        self._draft_row = W.HBox([self.k_slider, self.draft_box, self.ngram_slider])
        self._sampling_row = W.HBox([self.temp_slider, self.top_p_slider])
        self._measure_row = W.VBox(
            [
                W.HBox([self.sweep_range, self.repeats_box]),
                W.HBox([label("measure"), self.metric_box]),
            ]
        )
        return [
            self._css,
            self.prompt_box,
            self.system_box,
            W.HBox([self.model_box, self.chat_box]),
            W.HBox([label("drafts"), self.draft_kind]),
            self._draft_row,
            W.HBox([self.sampling_box, self.sampling_hint]),
            self._sampling_row,
            W.HBox([self.max_box, self.seed_box, self.inspect_box]),
            self.stop_box,
            self._measure_row,
            W.HBox(
                [
                    self.generate_button,
                    self.stop_button,
                    self.compare_button,
                    self.sweep_button,
                    self.estimate,
                ],
                layout=W.Layout(align_items="center"),
            ),
            self.status,
            self.output,
            self.history_html,
            self.clear_button,
        ]

    def _sync_enabled(self) -> None:
        """Enable, hide and explain each control for the current settings."""
        busy, source = self.running, self.draft_source
        drafts = source != "none"

        def show(w, on: bool) -> None:
            w.layout.display = None if on else "none"

        def able(button, why: str | None, tip: str) -> None:
            button.disabled = why is not None
            button.tooltip = why or tip

        with self.hold_sync():
            for w in self._inputs:
                w.disabled = busy
            show(self._draft_row, drafts)
            show(self.draft_box, source == "model")
            show(self.ngram_slider, source == "lookup")
            show(self._sampling_row, not self.model_sampling)
            show(self._measure_row, drafts)
            show(self.estimate, drafts)
            able(self.generate_button, WHY_RUNNING if busy else None, "Run the settings once")
            why = WHY_RUNNING if busy else None if drafts else WHY_NO_DRAFTS
            able(self.compare_button, why, "Normal against speculative decoding, until clear")
            able(self.sweep_button, why, "Speculative decoding at each k of the range")
            able(self.stop_button, None if busy else "nothing is running", "Stop the run")
