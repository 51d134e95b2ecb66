// Buttons of the live views and the Panel: a click goes to the kernel as
// {event: "click", button: name}; what it does is decided there.

function button(label, title, name, model) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "lv-btn";
  b.textContent = label;
  b.title = title;
  b.addEventListener("click", () => model.send({ event: "click", button: name }));
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
