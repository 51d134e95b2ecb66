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

from ..cache.sequence import CachedSequence, count_pass
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


BATCH_TOKENS = 4096  # padded tokens per forward pass of `option_logprobs`
BATCH_ROWS = 32


def option_items(tokenizer, questions, chat: bool | None = None, system=None) -> list:
    """``(context ids, [option ids, ...])`` per ``(prompt, [option, ...])``.

    The context is the prompt as a request encodes it (the chat template unless
    ``chat=False``); each option is scored as the reply, its own tokens.
    """
    use_chat = True if chat is None else chat
    return [
        (
            encode_prompt(Request(p, chat=use_chat, system=system), tokenizer),
            [list(tokenizer.encode(o, add_special_tokens=False)) for o in opts],
        )
        for p, opts in questions
    ]


def option_logprobs(model, items: list[tuple[list[int], list[list[int]]]]) -> list[list[float]]:
    """Each option's log-likelihood as the continuation of its context, batched.

    The sum over an option's tokens of their log-probabilities (float32 softmax),
    as lm-evaluation-harness computes ``loglikelihood``. Every (context, option)
    sequence is one row of a right-padded batch (padding after a row's last token
    cannot change a causal model's earlier logits); rows are grouped up to
    `BATCH_TOKENS` padded tokens or `BATCH_ROWS` rows per forward pass, with a
    fresh cache per pass, on the calling (worker) thread.

    Args:
        model: An mlx-lm model.
        items: ``(context ids, [option ids, ...])`` per question.

    Returns:
        One list per item: each option's summed log-probability.

    Raises:
        ValueError: An empty context or an option with no tokens.
    """
    from mlx_lm.models.cache import make_prompt_cache

    seqs = []  # (item, option, context length, full ids)
    for i, (ctx, opts) in enumerate(items):
        if not ctx:
            raise ValueError("choice: a prompt encodes to no tokens")
        for j, opt in enumerate(opts):
            if not opt:
                raise ValueError(f"choice: option {j} of question {i} has no tokens")
            seqs.append((i, j, len(ctx), [*ctx, *opt]))
    out = [[0.0] * len(opts) for _, opts in items]
    order = sorted(range(len(seqs)), key=lambda k: len(seqs[k][3]))
    groups, cur = [], []
    for k in order:
        width = len(seqs[k][3])  # the longest so far: the order is by length
        if cur and ((len(cur) + 1) * width > BATCH_TOKENS or len(cur) >= BATCH_ROWS):
            groups.append(cur)
            cur = []
        cur.append(k)
    if cur:
        groups.append(cur)
    for group in groups:
        width = max(len(seqs[k][3]) for k in group)
        rows = [seqs[k][3] + [0] * (width - len(seqs[k][3])) for k in group]
        logits = model(mx.array(rows, dtype=mx.uint32), cache=make_prompt_cache(model))
        count_pass()
        logits = logits.astype(mx.float32)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sums = []
        for r, k in enumerate(group):
            _, _, n_ctx, full = seqs[k]
            pos = mx.arange(n_ctx - 1, len(full) - 1)
            targets = mx.array(full[n_ctx:], dtype=mx.uint32)
            sums.append(logp[r, pos, targets].sum())
        for k, value in zip(group, mx.stack(sums).tolist()):
            out[seqs[k][0]][seqs[k][1]] = value
    return out
