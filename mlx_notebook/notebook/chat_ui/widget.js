// ChatUI's view (anywidget; copy.js comes first in the same module). It draws HTML
// the kernel built from escaped text (the streaming reply as deltas), and
// sends each click or key as one message: {type: "send" | "stop" | "stop_thinking" |
// "regenerate" | "edit" | "delete" | "new", ...}. No model output is interpreted here.

function h(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  e.append(...kids);
  return e;
}

const SETTINGS = [
  ["temperature", "Temperature", { min: 0, max: 2, step: 0.05 }, "the model's"],
  ["top_p", "Top-p", { min: 0.01, max: 1, step: 0.01 }, "the model's"],
  ["max_tokens", "Max tokens", { min: 1, max: 32768, step: 1 }, ""],
];

function render({ model, el }) {
  el.classList.add("mlxnb-chatui");
  // JupyterLab's notebook shortcuts (Shift+Enter runs the cell) stay out of the widget.
  el.setAttribute("data-lm-suppress-shortcuts", "true");

  const title = h("span", { class: "cu-title" });
  const fresh = h("button", {
    type: "button", class: "cu-btn",
    title: "Start a new conversation (the system prompt and settings stay)",
  }, "New chat");
  const log = h("div", { class: "cu-log", role: "log", "aria-label": "Conversation" });
  const settled = h("div");
  const live = h("div", { "aria-live": "off" }); // read once settled, not 20 times a second
  log.append(settled, live);
  const status = h("div", { class: "cu-status", role: "status" });
  const input = h("textarea", {
    class: "cu-input", rows: "2", "aria-label": "Message",
    placeholder: "Message (Enter sends, Shift+Enter starts a new line)",
  });
  const send = h("button", { type: "button", class: "cu-btn cu-primary", title: "Send (Enter)" }, "Send");
  const stop = h("button", {
    type: "button", class: "cu-btn cu-primary",
    title: "Stop the reply (the text so far is kept, marked stopped)",
  }, "Stop");
  const think = h("button", {
    type: "button", class: "cu-btn",
    title: "End the thinking now: the model answers from here",
  }, "Stop thinking");

  const fields = {};
  const grid = h("div", { class: "cu-grid" });
  const system = h("textarea", { class: "cu-system", rows: "2" });
  grid.append(h("label", {}, "System prompt", system));
  for (const [name, label, range, placeholder] of SETTINGS) {
    const f = h("input", { type: "number", placeholder, ...range });
    fields[name] = f;
    grid.append(h("label", {}, label, f));
  }
  const settings = h("details", { class: "cu-settings" }, h("summary", {}, "Settings"), grid);

  el.append(
    h("div", { class: "cu-head" }, title, fresh),
    log, status,
    h("div", { class: "cu-bar" }, input, h("div", { class: "cu-side" }, think, send, stop)),
    settings,
  );

  // The log follows the newest message (on open, on send, while a reply streams)
  // unless the user has scrolled up to read: then it stays where they are until they
  // come back near the bottom. Sizes change after a redraw and when the window is laid
  // out (opened in a cell not yet on screen): a ResizeObserver keeps a pinned log at
  // the bottom through both.
  const nearBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  let pinned = true;
  const toBottom = () => { if (pinned) log.scrollTop = log.scrollHeight; };
  log.addEventListener("scroll", () => { pinned = nearBottom(); }, { passive: true });
  const resized = typeof ResizeObserver === "function" ? new ResizeObserver(toBottom) : null;
  if (resized) for (const part of [log, settled, live]) resized.observe(part);
  const follow = (draw) => {
    draw();
    toBottom();
  };
  // A redraw (a reply's figures, another cell changing the chat) keeps an edit in
  // progress: the box opens again on the same message, with the text typed so far,
  // unless that message is gone or changed meanwhile.
  const drawSettled = () => follow(() => {
    const open = settled.querySelector(".cu-edit:not([data-done])");
    const kept = open && {
      i: Number(open.dataset.i), was: open.dataset.was, value: open.value,
      focused: document.activeElement === open, from: open.selectionStart, to: open.selectionEnd,
    };
    settled.innerHTML = model.get("transcript");
    const bubble = kept && settled.querySelector(`.turn.user[data-i="${kept.i}"]`);
    if (bubble && bubble.dataset.raw === kept.was) startEdit(bubble, kept.i, kept);
  });
  // The streaming reply comes as deltas (`receive`, from copy.js before this script).
  const copy = newCopy(model);
  const drawLive = () => follow(() => { live.innerHTML = copy.blocks.join(""); });
  copy.draw = drawLive;
  const drawBusy = () => {
    const busy = model.get("busy");
    input.readOnly = busy; // not disabled: the focus stays in the box
    input.setAttribute("aria-disabled", String(busy));
    el.classList.toggle("cu-busy", busy);
    send.hidden = busy;
    stop.hidden = !busy;
    think.hidden = !(busy && model.get("thinking"));
  };
  const drawStatus = () => {
    status.textContent = model.get("status");
    status.hidden = !model.get("status");
  };
  const drawSettings = () => {
    if (document.activeElement !== system) system.value = model.get("system");
    for (const [name, f] of Object.entries(fields)) {
      const v = model.get(name);
      if (document.activeElement !== f) f.value = v === null ? "" : String(v);
    }
  };
  const drawTitle = () => { title.textContent = model.get("title"); };

  const submit = () => {
    const text = input.value;
    if (model.get("busy") || !text.trim()) return;
    model.send({ type: "send", text });
    input.value = "";
    input.focus();
    pinned = true; // the user's own message: show it and the reply as it comes
    toBottom();
  };
  const enterSends = (go) => (e) => {
    e.stopPropagation(); // the notebook's own key handling never sees these keys
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      go();
    }
  };
  input.addEventListener("keydown", enterSends(submit));
  send.addEventListener("click", submit);
  stop.addEventListener("click", () => { model.send({ type: "stop" }); input.focus(); });
  think.addEventListener("click", () => model.send({ type: "stop_thinking" }));
  fresh.addEventListener("click", () => { model.send({ type: "new" }); input.focus(); });

  const startEdit = (bubble, i, kept = null) => {
    const body = bubble.querySelector(".md");
    if (!body || bubble.querySelector(".cu-edit")) return;
    const was = bubble.dataset.raw || "";
    const box = h("textarea", {
      class: "cu-input cu-edit", rows: "3", "aria-label": `Edit message ${i}`,
      "data-i": String(i), "data-was": was,
    });
    box.value = kept ? kept.value : was;
    // Sent or cancelled, the box is done: the next redraw does not bring it back.
    const finish = () => box.setAttribute("data-done", "");
    const save = () => {
      if (!box.value.trim()) return;
      finish();
      model.send({ type: "edit", index: i, text: box.value });
    };
    const cancel = () => { finish(); drawSettled(); };
    box.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { e.stopPropagation(); cancel(); return; }
      enterSends(save)(e);
    });
    const row = h("div", { class: "cu-edit-row" },
      h("button", { type: "button", class: "cu-btn cu-primary", title: "Send the edited message (Enter)", onclick: save }, "Send"),
      h("button", { type: "button", class: "cu-btn", title: "Keep the message as it was (Escape)", onclick: cancel }, "Cancel"));
    body.replaceChildren(box, row);
    if (kept && !kept.focused) return;
    box.focus();
    if (kept) box.setSelectionRange(kept.from, kept.to);
  };
  settled.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-act]");
    if (!b) return;
    const i = Number(b.dataset.i);
    if (b.dataset.act === "edit") startEdit(b.closest(".turn"), i);
    else model.send({ type: b.dataset.act, index: i });
  });

  const commit = (name, value) => { model.set(name, value); model.save_changes(); };
  system.addEventListener("change", () => commit("system", system.value));
  system.addEventListener("keydown", (e) => e.stopPropagation());
  for (const [name, f] of Object.entries(fields)) {
    f.addEventListener("keydown", (e) => e.stopPropagation());
    f.addEventListener("change", () => {
      const v = f.value === "" ? null : Number(f.value);
      if (name === "max_tokens" && (v === null || !(v >= 1))) { drawSettings(); return; }
      commit(name, v === null || Number.isNaN(v) ? null : name === "max_tokens" ? Math.round(v) : v);
    });
  }

  const onCustom = (msg) => {
    if (msg && msg.type === "restore" && !input.value) input.value = msg.text;
    if (msg && msg.type === "live") receive(copy, model, msg);
  };
  const handlers = [
    ["change:transcript", drawSettled],
    ["change:busy", drawBusy], ["change:thinking", drawBusy],
    ["change:status", drawStatus], ["change:title", drawTitle],
    ["change:system", drawSettings], ["msg:custom", onCustom],
  ];
  for (const name of SETTINGS.map((s) => s[0])) handlers.push([`change:${name}`, drawSettings]);
  for (const [ev, fn] of handlers) model.on(ev, fn);
  drawTitle(); drawSettled(); drawLive(); drawBusy(); drawStatus(); drawSettings();
  toBottom();
  return () => {
    for (const [ev, fn] of handlers) model.off(ev, fn);
    if (resized) resized.disconnect();
  };
}

export default { render };
