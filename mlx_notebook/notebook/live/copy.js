// A browser's copy of HTML blocks the kernel keeps current (Python: `delta.Deltas`).
// Messages: {kind: "full", seq, blocks} and {kind: "delta", seq, ops: [[block, start,
// cut, put], ...], count}, in order; offsets count UTF-16 units, as JS strings do. A
// copy that misses one asks {kind: "sync"} and ignores deltas until the next "full".

// Each view keeps its own copy: anywidget hands `initialize` and each `render` a
// different model object, so a copy kept by model would never see a message.
export function newCopy(model) {
  return { blocks: [...(model.get("initial") || [])], seq: 0, waiting: false, draw: () => {} };
}

export function receive(c, model, msg) {
  if (msg.kind === "full") {
    c.blocks = [...msg.blocks];
    c.seq = msg.seq;
    c.waiting = false;
  } else if (msg.kind === "delta") {
    if (c.waiting) return;
    if (msg.seq !== c.seq + 1) {
      c.waiting = true; // missed one: the whole view comes at the next refresh
      model.send({ kind: "sync" });
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

