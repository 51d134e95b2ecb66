// The Panel (anywidget; `copy.js` and `button.js` come first in the same module).
// Every setting is a trait the kernel holds: an input sets it, a change from the
// kernel moves the input. Which controls show, which buttons act and their hover
// texts come from the kernel too (`hidden`, `off`, `tips`). Below the form, the
// current run's view is a copy of HTML blocks the kernel keeps current by deltas.

let uid = 0;

// Keys typed into a field are the field's: the notebook's shortcuts (Shift+Enter runs
// the cell, "a" inserts one in command mode) never see them.
function ownKeys(input) {
  input.addEventListener("keydown", (e) => e.stopPropagation());
  return input;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// A labelled field: the label names it for screen readers and lines up the rows. A
// group of buttons is not wrapped in a <label>: a click on it would press the first.
function field(label, input) {
  const one = ["INPUT", "TEXTAREA"].includes(input.tagName) || input.querySelector("input[type=range]");
  const wrap = el(one ? "label" : "div", "pn-field");
  wrap.append(el("span", "pn-label", label), input);
  return wrap;
}

// Each control: its trait, how it shows the value and how an edit sets it.
function text(model, name, placeholder, rows) {
  const input = ownKeys(el(rows ? "textarea" : "input", "pn-text"));
  if (rows) input.rows = rows;
  else input.type = "text";
  input.placeholder = placeholder;
  input.addEventListener("input", () => {
    model.set(name, input.value);
    model.save_changes();
  });
  return { name, input, show: (v) => { if (input.value !== v) input.value = v; } };
}

function combo(model, name, placeholder) {
  const input = ownKeys(el("input", "pn-text pn-combo"));
  input.type = "text";
  input.placeholder = placeholder;
  const list = el("datalist");
  list.id = `mlxnb-models-${++uid}`;
  input.setAttribute("list", list.id);
  // Set on change (Enter or leaving the field), not per keystroke: the kernel looks
  // up a model's own sampling for each new name.
  input.addEventListener("change", () => {
    model.set(name, input.value.trim());
    model.save_changes();
  });
  const options = () => {
    list.replaceChildren(...(model.get("model_options") || []).map((o) => {
      const opt = el("option");
      opt.value = o;
      return opt;
    }));
  };
  options();
  model.on("change:model_options", options);
  const box = el("span", "pn-combo-box");
  box.append(input, list);
  return { name, input, box, show: (v) => { if (input.value !== v) input.value = v; },
    off: () => model.off("change:model_options", options) };
}

function number(model, name, min, max) {
  const input = ownKeys(el("input", "pn-number"));
  input.type = "number";
  input.min = min;
  input.max = max;
  input.step = 1;
  input.addEventListener("change", () => {
    const v = Math.round(Number(input.value));
    if (input.value === "" || !Number.isFinite(v)) {
      input.value = model.get(name);
      return;
    }
    const clamped = Math.min(max, Math.max(min, v));
    input.value = clamped;
    model.set(name, clamped);
    model.save_changes();
  });
  return { name, input, show: (v) => { if (input.value !== String(v)) input.value = v; } };
}

function slider(model, name, min, max, step) {
  const input = ownKeys(el("input", "pn-range")); // arrows move the slider, not the cell
  input.type = "range";
  Object.assign(input, { min, max, step });
  const out = el("output", "pn-readout");
  const fmt = (v) => (step < 1 ? Number(v).toFixed(2) : String(v));
  input.addEventListener("input", () => { out.textContent = fmt(input.value); });
  input.addEventListener("change", () => {
    model.set(name, step < 1 ? Number(input.value) : Math.round(Number(input.value)));
    model.save_changes();
  });
  const box = el("span", "pn-slider");
  box.append(input, out);
  return { name, input, box, show: (v) => { input.value = v; out.textContent = fmt(v); } };
}

function check(model, name, label, title) {
  const input = el("input");
  input.type = "checkbox";
  input.addEventListener("change", () => {
    model.set(name, input.checked);
    model.save_changes();
  });
  const box = el("label", "pn-check");
  if (title) box.title = title;
  box.append(input, el("span", "", label));
  return { name, input, box, show: (v) => { input.checked = !!v; } };
}

function toggles(model, name, label, options) {
  const box = el("span", "pn-toggles");
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", label);
  const buttons = options.map(([text, value]) => {
    const b = el("button", "pn-toggle", text);
    b.type = "button";
    b.dataset.value = value;
    b.addEventListener("click", () => {
      model.set(name, value);
      model.save_changes();
    });
    box.append(b);
    return b;
  });
  return { name, box, inputs: buttons,
    show: (v) => { for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.value === v)); } };
}

const drawn = new WeakMap(); // each element's HTML as last set

function setHtml(e, html) {
  if (drawn.get(e) !== html) {
    e.innerHTML = html;
    drawn.set(e, html);
  }
}

function row(cls, ...children) {
  const r = el("div", `pn-row ${cls || ""}`);
  r.append(...children);
  return r;
}

export default {
  render({ model, el: host }) {
    const root = el("div", "mlxnb-panel");
    const c = newCopy(model);
    const onMsg = (msg) => receive(c, model, msg);
    model.on("msg:custom", onMsg);

    const prompt = text(model, "prompt", "Prompt", 4);
    prompt.input.classList.add("pn-prompt");
    prompt.input.setAttribute("aria-label", "prompt");
    const system = text(model, "system", "System prompt (optional)");
    system.input.setAttribute("aria-label", "system prompt");
    const modelBox = combo(model, "model", "default");
    const chat = check(model, "chat", "chat template");
    const drafts = toggles(model, "draft_source", "drafts", [["none", "none"],
      ["prompt lookup", "lookup"], ["suffix", "suffix"], ["draft model", "model"]]);
    const k = slider(model, "num_draft_tokens", 1, 16, 1);
    const draftModel = combo(model, "draft_model", "a smaller model of the same family");
    const ngram = slider(model, "lookup_ngram", 1, 8, 1);
    const sampling = check(model, "model_sampling", "the model's own sampling");
    const temp = slider(model, "temperature", 0, 2, 0.05);
    const topP = slider(model, "top_p", 0.05, 1, 0.05);
    const maxTokens = number(model, "max_tokens", 1, 32768);
    const seed = number(model, "seed", 0, 2 ** 32 - 1);
    const inspectBox = check(model, "inspect", "inspect tokens",
      "Tint each token by its probability (hover: alternatives)");
    const stops = text(model, "stop_strings", "Stop strings, one per line", 2);
    const sweepFrom = number(model, "sweep_from", 1, 16);
    const sweepTo = number(model, "sweep_to", 1, 16);
    const repeats = number(model, "repeats", 1, 20);
    const metric = toggles(model, "metric", "measure", [["end to end", "e2e"], ["decode", "decode"]]);
    const controls = [prompt, system, modelBox, chat, drafts, k, draftModel, ngram, sampling,
      temp, topP, maxTokens, seed, inspectBox, stops, sweepFrom, sweepTo, repeats, metric];

    const hint = el("span", "pn-hint");
    const estimate = el("span", "pn-hint pn-estimate");
    const status = el("div", "pn-status");
    const history = el("div", "pn-history");
    // A click carries the settings as the page has them: ipywidgets holds a setting's
    // update back while an earlier one is unanswered, and a click (a custom message)
    // would overtake it: a slider moved just before Compare ran with its old value.
    const settings = () => ({ state: Object.fromEntries(controls.map((c) => [c.name, model.get(c.name)])) });
    const actions = {
      generate: button("▶ Generate", "", "generate", model, settings),
      stop: button("■ Stop", "", "stop", model),
      compare: button("Compare", "", "compare", model, settings),
      sweep: button("Sweep k", "", "sweep", model, settings),
      clear: button("Clear history", "", "clear", model),
    };
    actions.generate.classList.add("pn-primary");
    actions.stop.classList.add("pn-danger");

    // The run's view, with its own Inspect and Stop thinking (Stop is the panel's).
    const run = el("div", "mlxnb-view pn-run");
    const body = el("div", "mlxnb-body");
    const buttons = viewButtons(model, false);
    run.append(body, buttons.bar);

    const groups = {
      draft_row: row("", field("draft k", k.box), field("draft model", draftModel.box),
        field("n-gram", ngram.box)),
      sampling_row: row("", field("temperature", temp.box), field("top-p", topP.box)),
      measure_row: el("div", "pn-group"),
    };
    groups.draft_model = groups.draft_row.children[1];
    groups.lookup_ngram = groups.draft_row.children[2];
    groups.estimate = estimate;
    const range = el("span", "pn-range-pair");
    range.append(sweepFrom.input, el("span", "pn-dash", "to"), sweepTo.input);
    sweepFrom.input.setAttribute("aria-label", "sweep k from");
    sweepTo.input.setAttribute("aria-label", "sweep k to");
    groups.measure_row.append(
      row("", field("sweep k", range), field("repeats", repeats.input)),
      row("", field("measure", metric.box)),
    );
    root.append(
      row("pn-wide", prompt.input),
      row("pn-wide", system.input),
      row("", field("model", modelBox.box), chat.box),
      row("", field("drafts", drafts.box)),
      groups.draft_row,
      row("", sampling.box, hint),
      groups.sampling_row,
      row("", field("max tokens", maxTokens.input), field("seed", seed.input), inspectBox.box),
      row("pn-wide", field("stop", stops.input)),
      groups.measure_row,
      row("pn-actions", actions.generate, actions.stop, actions.compare, actions.sweep, estimate),
      status, run, history, row("", actions.clear),
    );
    host.append(root);

    const showValues = () => { for (const ctl of controls) ctl.show(model.get(ctl.name)); };
    const showState = () => {
      const busy = model.get("running");
      for (const ctl of controls) for (const i of ctl.inputs || [ctl.input]) i.disabled = busy;
      const hidden = new Set(model.get("hidden") || []);
      for (const [name, g] of Object.entries(groups)) g.hidden = hidden.has(name);
      const off = new Set(model.get("off") || []);
      const tips = model.get("tips") || {};
      for (const [name, b] of Object.entries(actions)) {
        b.disabled = off.has(name);
        b.title = tips[name] || "";
      }
      // HTML escaped by the kernel; redrawn only when it changed (an open "show all"
      // fold or a selection in the history stays as it is).
      setHtml(hint, model.get("sampling_hint"));
      setHtml(estimate, model.get("estimate"));
      setHtml(status, model.get("status"));
      setHtml(history, model.get("history_html"));
      buttons.update();
    };
    c.draw = drawInto(c, body, (html) => { run.hidden = !html; });
    c.draw();
    showValues();
    showState();
    const onInitial = () => adopt(c, model.get("initial") || [], model.get("initial_seq") || 0);
    model.on("change:initial_seq", onInitial);
    const values = controls.map((ctl) => `change:${ctl.name}`);
    for (const v of values) model.on(v, showValues);
    const state = ["running", "hidden", "off", "tips", "sampling_hint", "estimate", "status",
      "history_html", ...buttons.traits];
    for (const s of state) model.on(`change:${s}`, showState);
    return () => {
      model.off("msg:custom", onMsg);
      model.off("change:initial_seq", onInitial);
      for (const v of values) model.off(v, showValues);
      for (const s of state) model.off(`change:${s}`, showState);
      for (const ctl of controls) ctl.off?.();
    };
  },
};
