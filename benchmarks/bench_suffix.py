"""Suffix drafting on repeated work and on an open-ended prompt, on the default model.

Usage: python benchmarks/bench_suffix.py [--rounds 3]

Repeated work: the same extraction over two similar documents. Each measured run
starts from a clean session history: document A is extracted once (normal
decoding, which the session remembers), then document B with the method under
test. Methods are interleaved round by round: normal decoding, prompt lookup at
k = 2, 4, 8 (its best k is taken), and suffix drafting (adaptive, cap 16).

Open-ended: a prompt with nothing to copy, normal vs suffix, interleaved.
Every speculative text is checked against normal decoding's.
"""

import argparse
import statistics

from mlx_notebook.engine import Engine, Request

A = ("Order 1042: three blue mugs and two red plates, shipped to Lisbon on March 3 "
     "for Ana Costa, paid by card.")  # fmt: skip
B = ("Order 1043: three blue mugs and two green plates, shipped to Porto on March 4 "
     "for Rui Alves, paid by card.")  # fmt: skip
ASK = ("Extract the order as a short list with one line each for: order number, items, "
       "city, date, customer, payment.\n\n{}")  # fmt: skip
OPEN = "Describe a rainy afternoon in a small town."
METHODS = [("normal", "none", 3), ("lookup k=2", "lookup", 2), ("lookup k=4", "lookup", 4),
           ("lookup k=8", "lookup", 8), ("suffix", "suffix", 16)]  # fmt: skip


def second_run(eng, kind, k, n):
    eng.forget_history()
    eng.submit(Request(ASK.format(A), max_tokens=n, reuse_cache=False)).result()
    return eng.submit(
        Request(ASK.format(B), max_tokens=n, draft_kind=kind, num_draft_tokens=k,
                reuse_cache=False)
    ).result()  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=80)
    args = ap.parse_args()
    eng = Engine.default()
    eng.submit(Request("hi", max_tokens=2)).result()
    tps = {m: [] for m, _, _ in METHODS}
    ref = None
    for _ in range(args.rounds):
        for name, kind, k in METHODS:
            r = second_run(eng, kind, k, args.tokens)
            ref = ref or r.token_ids
            assert r.token_ids == ref, f"{name}: text differs from normal decoding"
            tps[name].append(r.stats.generation_tps)
    med = {m: statistics.median(v) for m, v in tps.items()}
    print(f"Repeated work (second of two similar extractions, {args.tokens} tokens), decode tok/s:")
    for m, v in tps.items():
        print(f"  {m:11s} {med[m]:6.1f} (min {min(v):.1f}, max {max(v):.1f})")
    best = max((m for m in med if m.startswith("lookup")), key=med.get)
    ratio_lookup, ratio_normal = med["suffix"] / med[best], med["suffix"] / med["normal"]
    print(
        f"  suffix / {best} (best lookup): {ratio_lookup:.2f}x; "
        f"suffix / normal: {ratio_normal:.2f}x; identical text: yes"
    )
    pairs = []
    for i in range(args.rounds * 2):
        order = [("none", 3), ("suffix", 16)][:: 1 if i % 2 == 0 else -1]
        got = {}
        for kind, k in order:
            r = eng.submit(Request(OPEN, max_tokens=48, draft_kind=kind, num_draft_tokens=k,
                                   reuse_cache=False)).result()  # fmt: skip
            got[kind] = r
        assert got["suffix"].token_ids == got["none"].token_ids
        pairs.append(got["suffix"].stats.generation_tps / got["none"].stats.generation_tps)
    print(
        f"Open-ended prompt, suffix / normal decode tok/s over {len(pairs)} interleaved pairs: "
        f"median {statistics.median(pairs):.3f} (min {min(pairs):.3f}, max {max(pairs):.3f}); "
        f"drafts proposed in the last run: {got['suffix'].stats.draft_tokens_proposed}"
    )


if __name__ == "__main__":
    main()
