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
    const buttons = viewButtons(model, true);
    const row = document.createElement("div");
    row.className = "mlxnb-row";
    root.append(row, body, buttons.bar);
    el.append(root);

    const controls = () => {
      buttons.update();
      drawRow(row, model);
    };
    c.draw = drawInto(c, body);
    c.draw();
    const onInitial = () => adopt(c, model.get("initial") || [], model.get("initial_seq") || 0);
    model.on("change:initial_seq", onInitial);
    controls();
    const names = [...buttons.traits, "row", "pressed"];
    for (const n of names) model.on(`change:${n}`, controls);
    return () => {
      model.off("msg:custom", onMsg);
      model.off("change:initial_seq", onInitial);
      for (const n of names) model.off(`change:${n}`, controls);
    };
  },
};
