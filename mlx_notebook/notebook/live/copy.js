// A browser's copy of HTML blocks the kernel keeps current (Python: `delta.Deltas`).
// Messages: {kind: "full", seq, blocks} and {kind: "delta", seq, ops: [[block, start,
// cut, put], ...], count}, in order; offsets count UTF-16 units, as JS strings do. A
// copy that misses one asks {kind: "sync"} and ignores deltas until the next "full" (or
// until the widget's saved state, `initial` as of `initial_seq`, is ahead of it).

// Each view keeps its own copy: anywidget hands `initialize` and each `render` a
// different model object, so a copy kept by model would never see a message.
export function newCopy(model) {
  const blocks = [...(model.get("initial") || [])];
  return { blocks, seq: model.get("initial_seq") || 0, waiting: 0, draw: () => {} };
}

// The widget's saved state moved on (a view's end): a copy behind it takes it.
export function adopt(c, blocks, seq) {
  if (seq < c.seq || (seq === c.seq && !c.waiting)) return;
  c.blocks = [...blocks];
  c.seq = seq;
  c.waiting = 0;
  c.draw();
}

export function receive(c, model, msg) {
  if (msg.kind === "full") {
    if (msg.seq < c.seq) return; // older than the state it adopted
    c.blocks = [...msg.blocks];
    c.seq = msg.seq;
    c.waiting = 0;
  } else if (msg.kind === "delta") {
    if (msg.seq <= c.seq) return; // already in the copy (it adopted a later state)
    if (c.waiting || msg.seq !== c.seq + 1) {
      // Missed one: the whole view comes at the next refresh. Ask again every 20
      // dropped deltas, in case the question was lost.
      if (c.waiting % 20 === 0) model.send({ kind: "sync" });
      c.waiting += 1;
      return;
    }
    for (const [i, start, cut, put] of msg.ops) {
      const b = c.blocks[i] ?? "";
      c.blocks[i] = b.slice(0, start) + put + b.slice(start + cut);
    }
    c.blocks.length = msg.count;
    for (let i = 0; i < msg.count; i++) c.blocks[i] ??= "";
    c.seq = msg.seq;
  } else {
    return;
  }
  c.draw();
}

