"""Whether a model's passes can be shared and lengthened exactly: checked once per model.

Rows whose prompts fit one chunk prefill together, right-padded to the longest, as
mlx-lm's batched prompt processing does: each cache kind learns the rows' real
lengths (``prepare``) and drops or moves the padding afterwards (``finalize``).
That is exact only when every layer uses those lengths. Attention masks the
padding; mamba2's scan stops at each row's length; but some recurrent layers of
mlx-lm's models (rwkv7's, Jamba's Mamba-1 mixer, Bailing's linear attention ...)
take no mask and carry the padding into their state.

Which layers do is found by measurement, not from a list of names: three prompts of
different lengths are prefilled together twice, with different padding tokens,
and each row's next logits are compared with the row prefilled alone. A layer
that reads its padding gives rows that depend on what the padding was, or that
part from the row alone. Such a model's prompts prefill one at a time; its rows
still decode together (one token per row per step: no padding there). The same
check runs one batched step over rows prefilled alone: a model whose batched step
parts from its rows alone (or raises) runs its rows alone.

`multi_token_problem` asks the same of speculation: whether one pass over several new
tokens gives the logits that single steps give. Where a model's caches keep a sliding
window, that pass is made past the window (a window's difference shows only there).
"""

from __future__ import annotations

import mlx.core as mx

from .caches import extract, finalize, merge, prepare_padding

# Prompts of the check: the short row gets as much padding as it has tokens. Three
# rows, not two: a layer that broadcasts a batch's mask over its heads by mistake
# (mlx-lm's phi3small) raises with three rows and silently passes with two.
LONG, SHORT, MID = 12, 6, 9
# Logit differences are compared relative to the logits' own scale: batched and
# single-row matrix products round differently (more so on quantized weights), while
# padding read as tokens moves logits by a large share of their spread.
RTOL = 0.02
# The longest sliding window the speculation check reaches past (its one-time cost: a
# prefill of that many tokens); a longer one is checked as a short model is.
MAX_WINDOW = 4096
CHUNK = 512  # the check's prefill, in passes of this many tokens


def check_batching(model, vocab_size: int, tables=()) -> tuple[str | None, str | None]:
    """What keeps ``model``'s rows from sharing passes exactly: (prefill, decoding).

    Worker thread only (it runs the model). Costs a few short forward passes.

    Args:
        model: A loaded mlx-lm model.
        vocab_size: Ids below this are valid input tokens.
        tables: The CPU fast path's RoPE tables for ``model`` (grown to fit).

    Returns:
        ``(prefill, decoding)``: None each where rows are exact, else one line. The
        first says why prompts must prefill one at a time (a padded row depends on its
        padding, or parts from the row alone); the second why rows cannot decode
        together (a batched step over rows prefilled alone parts from the rows alone).
    """
    from mlx_lm.models.cache import make_prompt_cache

    ids = _probe(vocab_size)
    rows = [ids[:LONG], ids[LONG : LONG + SHORT], ids[LONG + SHORT :]]
    for t in tables:
        t.grow(LONG + 2)

    def prefilled(tokens: list[int]) -> list:
        cache = make_prompt_cache(model)
        model(mx.array([tokens[:-1]]), cache=cache)
        return cache

    def last(cache, token: int) -> mx.array:
        return model(mx.array([[token]]), cache=cache)[0, -1].astype(mx.float32)

    def together(pad: int) -> list[mx.array]:
        fed = [r[:-1] for r in rows]
        width = max(len(f) for f in fed)
        padding = [width - len(f) for f in fed]
        cache = merge([make_prompt_cache(model) for _ in rows])
        prepare_padding(cache, [len(f) for f in fed], padding)
        model(mx.array([f + [pad] * p for f, p in zip(fed, padding)]), cache=cache)
        finalize(cache)
        return [last(extract(cache, i), r[-1]) for i, r in enumerate(rows)]

    def decoded_together() -> list[mx.array]:
        cache = merge([prefilled(r) for r in rows])
        for t in tables:  # the fast path's RoPE: each row's own position
            t.pin([len(r) - 1 for r in rows])
        try:
            logits = model(mx.array([[r[-1]] for r in rows]), cache=cache)[:, -1]
        finally:
            for t in tables:
                t.pin(None)
        return [logits[i].astype(mx.float32) for i in range(len(rows))]

    solo = [last(prefilled(r), r[-1]) for r in rows]
    first, second, decoded = together(ids[1]), together(ids[-2]), decoded_together()
    mx.eval(solo, first, second, decoded)
    prefill = decoding = None
    for i, s in enumerate(solo):
        if decoding is None and _apart(decoded[i], s, s):
            decoding = f"a batched step parted from the rows alone ({_kinds(model)})"
        if prefill is None and _apart(first[i], second[i], s):
            prefill = f"a padded row changed with what its padding held ({_kinds(model)})"
        if prefill is None and _apart(first[i], s, s):
            prefill = f"a padded row differed from the row alone ({_kinds(model)})"
    return prefill, decoding


def multi_token_problem(model, vocab_size: int, tables=(), between=lambda: None) -> str | None:
    """Why a pass over several new tokens differs from single steps on ``model``, or None.

    Speculative decoding verifies drafts in one pass over several tokens; it equals
    normal decoding only when that pass gives each position the logits single steps
    would. mlx-lm's plamo3 does not: its sliding-window mask lets a multi-token pass
    see one key more than the window its cache keeps for single steps.

    mlx-lm's plamo3 masks ``window + 1`` keys in a pass and keeps ``window`` for a
    step, so the pass is made past the model's longest window (up to `MAX_WINDOW`).

    Worker thread only. Costs two prefills of `LONG` tokens, or of one window plus one
    on a model with sliding windows (once per model: at its first speculative job, or
    its first prompt longer than its window), one pass of `SHORT` tokens and as many
    single steps. ``between`` is called between the prefills' chunks (a cancel point).
    """
    from mlx_lm.models.cache import make_prompt_cache

    start = check_length(sliding_window(model))
    ids = _probe(vocab_size, start + SHORT)
    for t in tables:
        t.grow(start + SHORT + 1)
    caches = [make_prompt_cache(model), make_prompt_cache(model)]
    for c in caches:
        for i in range(0, start, CHUNK):
            mx.eval(model(mx.array([ids[i : min(i + CHUNK, start)]]), cache=c))
            between()
    new = ids[start : start + SHORT]
    together = model(mx.array([new]), cache=caches[0])[0].astype(mx.float32)
    single = [model(mx.array([[t]]), cache=caches[1])[0, -1] for t in new]
    single = mx.stack(single).astype(mx.float32)
    mx.eval(together, single)
    for i in range(len(single)):
        if _apart(together[i], single[i], single[i]):
            return f"a pass over several tokens parts from single steps ({_kinds(model)})"
    return None


def check_length(window: int) -> int:
    """Tokens `multi_token_problem` prefills before its pass: past a window it reaches."""
    return window + 1 if LONG <= window <= MAX_WINDOW else LONG


def _probe(vocab_size: int, n: int = LONG + SHORT + MID) -> list[int]:
    """The check's ``n`` token ids: spread over the vocabulary, clear of its first ids."""
    step = max(1, vocab_size // (LONG + SHORT + MID + 3))
    return [(5 + i * step) % vocab_size for i in range(n)]


def sliding_window(model) -> int:
    """The longest sliding window of ``model``'s caches (0: none keeps a window)."""
    from mlx_lm.models.cache import make_prompt_cache

    from .caches import layers

    sizes = [getattr(c, "max_size", None) for c in layers(make_prompt_cache(model))]
    return max((s for s in sizes if isinstance(s, int)), default=0)


def _apart(x: mx.array, y: mx.array, solo: mx.array) -> bool:
    """Whether two logit rows differ by more than `RTOL` of the solo row's spread."""
    scale = max(float(mx.max(solo) - mx.min(solo)), 1e-6)
    return float(mx.max(mx.abs(x - y))) > RTOL * scale


def _kinds(model) -> str:
    from mlx_lm.models.cache import make_prompt_cache

    from .caches import layers

    names = sorted({type(c).__name__ for c in layers(make_prompt_cache(model))})
    return "layers with " + ", ".join(names)
