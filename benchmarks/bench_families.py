"""What speculation's snapshot-and-replay costs on caches that cannot be trimmed.

Usage: python benchmarks/bench_families.py [--rounds 5] [--tokens 96]

Random-weight models of one size (hidden 512, 8 layers) from three families:
llama (full attention: rejected drafts are trimmed), qwen3_5 (gated-delta
state in half its layers: restored from a snapshot, the accepted tokens fed
again in front of the next pass) and gemma3_text (sliding windows of 8 tokens:
the same, once past the window). Per family, interleaved round by round:

- normal: greedy decoding alone;
- all accepted: suffix drafting of an answer the session has seen (every draft
  is accepted, so only the checkpoints cost anything);
- all rejected: prompt lookup with 1-grams on a prompt of repeated words the
  model does not follow (a draft every round, none accepted: a rewind per round,
  which is a restore and a one-token replay where the cache cannot be trimmed).

Figures are decode tok/s medians with min and max, and each speculative
method's ratio to normal decoding in the same rounds; every text is checked
against normal decoding's. Random weights predict nothing, so these ratios
measure the machinery, not a speed-up a real model would see.
"""

import argparse
import os
import statistics
import tempfile

from mlx_notebook.engine import Engine, Request
from mlx_notebook.testing.families import build_family

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

SIZE = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
)
EXTRA = {
    "qwen3_5": dict(
        linear_num_value_heads=8,
        linear_num_key_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
    ),
    "gemma3_text": dict(query_pre_attn_scalar=64),
}
PROMPT = "Rivers flow to the sea; mountains rise above the clouds. " * 4
METHODS = [
    ("normal", {}),
    ("all accepted", dict(draft="suffix", num_draft_tokens=8)),
    ("all rejected", dict(draft="lookup", num_draft_tokens=4, lookup_ngram=1)),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    root = tempfile.mkdtemp()
    eng = Engine()
    paths = {
        f: str(build_family(f, f"{root}/{f}", **SIZE, **EXTRA.get(f, {})))
        for f in ("llama", "qwen3_5", "gemma3_text")
    }
    print(f"bench_families: {args.rounds} rounds, {args.tokens} tokens, decode tok/s")
    for fam, path in paths.items():
        base = dict(model=path, chat=False, max_tokens=args.tokens, reuse_cache=False, batch=False)
        ref = eng.submit(Request(PROMPT, **base)).result()  # remembered: suffix copies it
        tps = {m: [] for m, _ in METHODS}
        stats = {}
        for i in range(args.rounds):
            order = METHODS[i % len(METHODS) :] + METHODS[: i % len(METHODS)]
            for name, opts in order:
                r = eng.submit(Request(PROMPT, remember=False, **base, **opts)).result()
                assert r.token_ids == ref.token_ids, (fam, name)
                tps[name].append(r.stats.generation_tps)
                stats[name] = r.stats
        print(f"\n{fam}")
        for name, _ in METHODS:
            v, st = tps[name], stats[name]
            line = f"  {name:14s} {statistics.median(v):7.1f} ({min(v):.1f}-{max(v):.1f})"
            if name != "normal":
                ratios = [a / b for a, b in zip(v, tps["normal"])]
                rounds = max(st.draft_rounds, 1)
                line += (
                    f"  {statistics.median(ratios):.2f}x normal ({min(ratios):.2f}-"
                    f"{max(ratios):.2f}); accepted {st.draft_tokens_accepted}/"
                    f"{st.draft_tokens_proposed}, replayed {st.replayed_tokens / rounds:.2f}"
                    f" tokens per round, {st.decode_steps} passes"
                )
            print(line)
    eng.close()


if __name__ == "__main__":
    main()
