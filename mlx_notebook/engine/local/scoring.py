"""Score a given text: per-token log-probabilities without generating (one prefill).

``Engine.score("The answer", prompt="Question?")`` runs the model once over the
prompt and the text, in chunks on the worker thread, and returns a `TokenTable`:
for each token of the text, its log-probability, rank and the entropy at that
position, with the most likely alternatives. Compare how two models rate the
same answer, or find where a model is surprised.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from ..cache.sequence import CachedSequence
from ..decoding.prompt import encode_prompt, encode_text
from ..request import Request
from ..token_records import TokenRecord, TokenTable, position_stats, special_ids, texts_of

CHUNK = 256  # tokens per forward pass: bounds the [chunk, vocab] logits in memory


def split_tokens(tokenizer, text, prompt=None, chat: bool | None = None, system=None):
    """``(context ids, scored ids)`` for a text, a prompt and a text, or chat messages.

    * messages (a list of dicts) ending with an assistant message: the reply is
      scored after the conversation before it, through the chat template;
    * ``text`` with a ``prompt``: the text is scored as the reply to the prompt
      (through the chat template unless ``chat=False``);
    * ``text`` alone: every token after the first is scored (the first, after
      the tokenizer's BOS if it adds one).

    ``text`` may also be a list of token ids (exactly those are scored).

    Raises:
        ValueError: Nothing to score, or messages that do not end with a reply.
    """
    if isinstance(text, list) and text and isinstance(text[0], dict):
        if text[-1].get("role") != "assistant":
            raise ValueError("score: the last message must be the assistant reply to score")
        ctx = encode_prompt(Request(text[:-1], chat=True, system=system), tokenizer)
        msgs = [{"role": "system", "content": system}, *text] if system else text
        full = encode_text(tokenizer, tokenizer.apply_chat_template(msgs, tokenize=False))
        if full[: len(ctx)] != ctx:  # a template that re-renders earlier turns
            raise ValueError("score: the chat template renders the reply's context differently")
        return ctx, full[len(ctx) :]
    ids = list(text) if _is_ids(text) else None
    if prompt is not None:
        use_chat = True if chat is None else chat
        ctx = encode_prompt(Request(prompt, chat=use_chat, system=system), tokenizer)
        scored = ids if ids is not None else tokenizer.encode(text, add_special_tokens=False)
        return ctx, list(scored)
    full = ids if ids is not None else list(tokenizer.encode(text))
    if len(full) < 2:
        raise ValueError("score: give at least two tokens of text (or a prompt)")
    return full[:1], full[1:]


def _is_ids(text) -> bool:
    return (
        isinstance(text, Sequence)
        and not isinstance(text, str)
        and all(isinstance(t, int) for t in text)
    )


def score_tokens(model, tokenizer, context: list[int], scored: list[int], top_k: int = 5):
    """Run ``model`` over ``context + scored`` (on the calling, worker, thread); a `TokenTable`.

    Raises:
        ValueError: Nothing to score, or ``top_k`` out of 0..20.
    """
    if not scored:
        raise ValueError("score: the text has no tokens to score")
    if not context:
        raise ValueError("score: no context before the first token")
    if not 0 <= top_k <= 20:
        raise ValueError(f"score: top_k must be in 0..20 (got {top_k})")
    full = [*context, *scored]
    seq = CachedSequence(model)
    first = len(context) - 1  # the position whose logits predict scored[0]
    if first:
        mx.eval(seq.forward(full[:first]))  # the context, its logits unused
    cols: list[list] = [[], [], [], [], []]
    for start in range(first, len(full) - 1, CHUNK):
        ids = full[start : min(start + CHUNK, len(full) - 1)]
        logits = seq.forward(ids)[0]
        targets = mx.array(full[start + 1 : start + 1 + len(ids)], dtype=mx.uint32)
        lse = mx.logsumexp(logits.astype(mx.float32), axis=-1, keepdims=True)  # as mlx-lm
        for col, part in zip(cols, position_stats(logits, targets, top_k, lse)):
            col.extend(part)
    table = TokenTable()
    specials = special_ids(tokenizer)
    for i, tid in enumerate(scored):
        logprob, rank, entropy, top_ids, top_lps = (c[i] for c in cols)
        texts = texts_of(tokenizer, specials, [tid, *top_ids])
        top = tuple(zip(texts[1:], top_ids, top_lps))
        table.append(
            TokenRecord(
                i, tid, texts[0], logprob, rank, entropy, top, "text", special=tid in specials
            )
        )
    return table
