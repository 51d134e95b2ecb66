// Buttons of the live views and the Panel: a click goes to the kernel as
// {event: "click", button: name, ...extra()}; what it does is decided there.

function button(label, title, name, model, extra = () => ({})) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "lv-btn";
  b.textContent = label;
  b.title = title;
  b.addEventListener("click", () => model.send({ ...extra(), event: "click", button: name }));
  return b;
}

// The caller's own row of buttons (`row` trait), gone once the view ends.
function drawRow(row, model) {
  const spec = model.get("row") || {};
  const pressed = new Set(model.get("pressed") || []);
  const key = JSON.stringify(spec);
  if (row.dataset.key !== key) {
    row.replaceChildren();
    if (spec.label) {
      const label = document.createElement("span");
      label.className = "mlxnb-row-label";
      label.textContent = spec.label;
      row.append(label);
    }
    for (const [name, text, title] of spec.buttons || []) {
      const b = button(text, title, name, model);
      b.dataset.name = name;
      row.append(b);
    }
    row.dataset.key = key;
  }
  for (const b of row.querySelectorAll("button")) b.disabled = pressed.has(b.dataset.name);
  row.hidden = !(spec.buttons || []).length || model.get("ended");
}

// A view's own buttons over its top right corner: Stop thinking, Inspect and, unless
// it is a Panel's run (the Panel has its own), Stop. `update()` shows them as the
// traits say; `traits` are the ones it reads.
function viewButtons(model, withStop) {
  const bar = document.createElement("div");
  bar.className = "mlxnb-stop";
  const think = button("Stop thinking", "End the reasoning here: the model answers now", "think", model);
  const inspect = button("Inspect", "Tint each token by its probability (hover a token for its alternatives)", "inspect", model);
  const stop = withStop ? button("Stop", "Stop generating (keeps the text so far)", "stop", model) : null;
  bar.append(think, inspect, ...(stop ? [stop] : []));
  const update = () => {
    if (stop) {
      stop.hidden = !model.get("can_stop");
      stop.disabled = model.get("stopping");
    }
    inspect.hidden = !model.get("can_inspect");
    inspect.setAttribute("aria-pressed", String(model.get("inspecting")));
    think.hidden = !model.get("can_end_thinking");
    think.disabled = model.get("thinking_ended");
    think.textContent = model.get("thinking_ended") ? "answering…" : "Stop thinking";
    bar.classList.toggle("ended", model.get("ended"));
  };
  const traits = ["can_stop", "stopping", "can_inspect", "inspecting", "can_end_thinking",
    "thinking_ended", "ended"];
  return { bar, update, traits };
}

// Draws a copy's blocks into ``body`` when they changed.
function drawInto(c, body, after = () => {}) {
  let shown = null;
  return () => {
    const html = c.blocks.join("");
    if (html !== shown) {
      body.innerHTML = html; // built from escaped text by the kernel
      shown = html;
    }
    after(html);
  };
}
