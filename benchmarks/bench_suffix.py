"""Suffix drafting on repeated work and on an open-ended prompt, on the default model.

Usage: python benchmarks/bench_suffix.py [--rounds 3] [--tokens 128]

Three scenarios, greedy, every prefill from scratch:

- again: the session answered "List five tips for staying healthy." (normal
  decoding, remembered); now ask "List six tips ...". Prompt lookup has nothing
  to copy from the new prompt; suffix drafting copies from the earlier answer.
- rewrite: a chat turn "Rewrite the list above, adding one more tip at the end."
  after that answer. Here the list is in the prompt, so prompt lookup copies too.
- open-ended: "Describe a rainy afternoon in a small town.", with a clean
  session history: nothing to copy.

Methods are interleaved round by round (the order rotates each round): normal,
prompt lookup at k = 2, 4, 8, 16 (its best k is taken afterwards), suffix
drafting (adaptive length, cap 16). The measured runs do not add to the session
index (`remember=False`), so every round sees the same history. Figures are
decode tok/s medians with min and max; every text is checked against normal
decoding's.
"""

import argparse
import os
import statistics

from mlx_notebook.engine import Engine, Request

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

FIVE = "List five tips for staying healthy."
SIX = "List six tips for staying healthy."
REWRITE = "Rewrite the list above, adding one more tip at the end."
OPEN = "Describe a rainy afternoon in a small town."
LOOKUP_KS = (2, 4, 8, 16)
METHODS = [("normal", "none", 3), *((f"lookup k={k}", "lookup", k) for k in LOOKUP_KS),
           ("suffix", "suffix", 16)]  # fmt: skip


def measure(eng, prompt, methods, rounds, tokens):
    """Decode tok/s per method over interleaved rounds; texts checked equal."""
    tps = {m: [] for m, _, _ in methods}
    ref = None
    for i in range(rounds):
        order = methods[i % len(methods) :] + methods[: i % len(methods)]
        for name, kind, k in order:
            req = Request(prompt, max_tokens=tokens, draft_kind=kind, num_draft_tokens=k,
                          temperature=0, repetition_penalty=1, reuse_cache=False,
                          remember=False)  # fmt: skip
            r = eng.submit(req).result()
            ref = ref or r.token_ids
            assert r.token_ids == ref, f"{name}: text differs from normal decoding"
            tps[name].append(r.stats.generation_tps)
    return tps


def report(title, tps):
    med = {m: statistics.median(v) for m, v in tps.items()}
    print(title)
    for m, v in tps.items():
        print(f"  {m:12s} {med[m]:6.1f} tok/s (min {min(v):.1f}, max {max(v):.1f})")
    best = max((m for m in med if m.startswith("lookup")), key=med.get, default=None)
    line = f"  suffix / normal: {med['suffix'] / med['normal']:.2f}x"
    if best:
        line += f"; suffix / {best} (best lookup): {med['suffix'] / med[best]:.2f}x"
    for base in ("normal", "lookup k=4"):  # paired: the same round's runs
        ratios = [s / b for s, b in zip(tps["suffix"], tps[base])]
        line += (f"\n  suffix / {base}, per round: median {statistics.median(ratios):.2f}x "
                 f"({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
    print(line + "\n  identical text in every run")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    eng = Engine.default()
    eng.submit(Request("hi", max_tokens=2)).result()  # load and warm up

    eng.forget_history()
    first = eng.submit(
        Request(FIVE, max_tokens=160, reuse_cache=False, temperature=0, repetition_penalty=1)
    ).result()
    n, tokens = args.rounds, args.tokens
    report(f"again: '{SIX}' after '{FIVE}' ({tokens} tokens), decode:",
           measure(eng, SIX, METHODS, n, tokens))  # fmt: skip
    chat = [{"role": "user", "content": FIVE}, {"role": "assistant", "content": first.text},
            {"role": "user", "content": REWRITE}]  # fmt: skip
    report(f"rewrite: '{REWRITE}' ({tokens} tokens), decode:",
           measure(eng, chat, METHODS, n, tokens))  # fmt: skip

    eng.forget_history()
    pair = [("normal", "none", 3), ("suffix", "suffix", 16)]
    tps = measure(eng, OPEN, pair, 2 * n, 48)
    ratios = [s / b for s, b in zip(tps["suffix"], tps["normal"])]
    print(
        f"open-ended: '{OPEN}' (48 tokens), suffix / normal decode tok/s over "
        f"{len(ratios)} interleaved pairs: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); identical text"
    )


if __name__ == "__main__":
    main()
