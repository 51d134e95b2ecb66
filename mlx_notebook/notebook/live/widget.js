// The live view (anywidget; `copy.js` comes first in the same module). Its HTML is
// built by the kernel from escaped text; here it is only kept (`receive`) and shown.
// Clicks go back as {event: "click", button: "stop" | "inspect" | "think"}.

export default {
  render({ model, el }) {
    const c = newCopy(model);
    const onMsg = (msg) => receive(c, model, msg);
    model.on("msg:custom", onMsg);
    const root = document.createElement("div");
    root.className = "mlxnb-view";
    const body = document.createElement("div");
    body.className = "mlxnb-body";
    const bar = document.createElement("div");
    bar.className = "mlxnb-stop";
    const think = button("Stop thinking", "End the reasoning here: the model answers now", "think", model);
    const inspect = button("Inspect", "Tint each token by its probability (hover a token for its alternatives)", "inspect", model);
    const stop = button("Stop", "Stop generating (keeps the text so far)", "stop", model);
    bar.append(think, inspect, stop);
    const row = document.createElement("div");
    row.className = "mlxnb-row";
    root.append(row, body, bar);
    el.append(root);

    let shown = null;
    const draw = () => {
      const html = c.blocks.join("");
      if (html !== shown) {
        body.innerHTML = html; // built from escaped text by the kernel
        shown = html;
      }
    };
    const controls = () => {
      stop.hidden = !model.get("can_stop");
      stop.disabled = model.get("stopping");
      inspect.hidden = !model.get("can_inspect");
      inspect.setAttribute("aria-pressed", String(model.get("inspecting")));
      think.hidden = !model.get("can_end_thinking");
      think.disabled = model.get("thinking_ended");
      think.textContent = model.get("thinking_ended") ? "answering…" : "Stop thinking";
      bar.classList.toggle("ended", model.get("ended"));
      drawRow(row, model);
    };
    c.draw = draw;
    draw();
    const onInitial = () => adopt(c, model.get("initial") || [], model.get("initial_seq") || 0);
    model.on("change:initial_seq", onInitial);
    controls();
    const names = ["can_stop", "stopping", "can_inspect", "inspecting", "can_end_thinking",
      "thinking_ended", "ended", "row", "pressed"];
    for (const n of names) model.on(`change:${n}`, controls);
    return () => {
      model.off("msg:custom", onMsg);
      model.off("change:initial_seq", onInitial);
      for (const n of names) model.off(`change:${n}`, controls);
    };
  },
};
