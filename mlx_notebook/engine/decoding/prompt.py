"""Prompt encoding and context-window limits. No MLX: safe on any thread."""

from __future__ import annotations

from ..errors import ContextOverflow
from ..request import Request


def encode_prompt(request: Request, tokenizer) -> list[int]:
    """Token ids for the request, with the chat template when asked and available."""
    prompt = request.prompt
    if request.chat and getattr(tokenizer, "has_chat_template", False):
        msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if request.system:
            msgs = [{"role": "system", "content": request.system}, *msgs]
        # mlx-lm's wrapper maps ``enable_thinking`` to the template's own switch.
        think = {} if request.think is None else {"enable_thinking": request.think}
        text = tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, **think
        )
    else:
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        if request.system:
            text = f"{request.system}\n\n{text}"
    ids = encode_text(tokenizer, text)
    if not ids:
        raise ValueError("prompt: encodes to no tokens")
    if request.branch_from is not None:  # the start of the reply being continued
        ids.extend(request.branch_from.prefix)
    return ids


def encode_text(tokenizer, text: str) -> list[int]:
    """Ids of ``text``, with BOS unless the text (a rendered template) starts with it.

    The same rule as mlx_lm.stream_generate, so results match it token for token.
    """
    bos = getattr(tokenizer, "bos_token", None)
    return list(tokenizer.encode(text, add_special_tokens=bos is None or not text.startswith(bos)))


def fit_context(n_prompt: int, max_tokens: int, context: int | None, model: str) -> int:
    """The ``max_tokens`` that fits, or raise when the prompt alone does not fit.

    Args:
        n_prompt: Prompt tokens.
        max_tokens: Requested generation budget.
        context: The model's context window in tokens, or None when unknown.
        model: Model name for the message.

    Returns:
        ``max_tokens``, lowered to the room the context leaves after the prompt.

    Raises:
        ContextOverflow: One line with both numbers.
    """
    if context is None:
        return max_tokens
    if n_prompt >= context:
        raise ContextOverflow(
            f"prompt: {n_prompt} tokens do not fit the context window of {model} "
            f"({context} tokens, and at least one is needed to generate)"
        )
    return min(max_tokens, context - n_prompt)


def lowered(asked: int, fitted: int, n_prompt: int, context: int | None) -> str:
    """The notice for a budget `fit_context` lowered."""
    return (
        f"max_tokens lowered from {asked} to {fitted}: the prompt "
        f"uses {n_prompt} of the model's {context}-token context"
    )


def check_top_k(top_k: int | None, vocab: int, model: str) -> None:
    """Raise `ValueError` when ``top_k`` exceeds the model's vocabulary."""
    if top_k is not None and top_k > vocab:
        raise ValueError(f"top_k: {top_k} exceeds the vocabulary of {model} ({vocab} tokens)")
