"""Checks of a request against the models it names, on the caller's thread (no MLX)."""

from __future__ import annotations

from ...models.registry import LoadedModel, Registry
from ...models.spec import require_available
from ...models.vocab import spec_fingerprint
from ..decoding.prompt import check_top_k, encode_prompt, fit_context
from ..errors import IncompatibleDraft
from ..request import Request


def check_request(request: Request, registry: Registry) -> None:
    """Everything `Engine.submit` checks before queuing.

    Loaded models are checked in full; others, where their files allow.

    Raises:
        ValueError: Naming the field or the problem, in one line.
    """
    request.validate()
    if registry.peek(request.model) is None:
        require_available(request.model, "-m")
    if request.mode == "draft" and registry.peek(request.draft) is None:
        require_available(request.draft, "--draft")
    check_draft(request, registry)
    lm = registry.peek(request.model)
    if not isinstance(request.prompt, str) and request.chat:
        require_chat_template(request.model, lm)
    if lm is not None:
        ids = encode_prompt(request, lm.tokenizer)
        fit_context(len(ids), request.max_tokens, lm.context_length, lm.name)
        check_top_k(request.top_k, lm.logits_size or lm.vocab_size, lm.name)
        if request.constraint is not None:
            check_writable(request.constraint, lm.tokenizer, lm.logits_size or lm.vocab_size)


_writable: set = set()


def check_writable(schema, tokenizer, width: int) -> None:
    """Refuse a schema whose text the model's tokenizer cannot write (a vocabulary with gaps).

    Builds the grammar state once per schema and tokenizer (`map` checks every row).
    """
    from ..tokens.constraint import for_schema

    key = (tokenizer, schema.kind, schema.grammar, schema.choices, schema.fast, width)
    if key in _writable:
        return
    for_schema(schema, tokenizer, width)
    if len(_writable) > 16:
        _writable.clear()
    _writable.add(key)


def check_draft(request: Request, registry: Registry) -> None:
    """Refuse a draft model whose vocabulary differs, from loaded models or files."""
    if request.mode != "draft":
        return
    keys = []
    for spec in (request.model, request.draft):
        lm = registry.peek(spec)
        keys.append(lm.vocab_key if lm is not None else spec_fingerprint(spec))
    if None not in keys and keys[0] != keys[1]:
        raise IncompatibleDraft(vocab_message(request.model, request.draft))


def require_chat_template(spec: str, lm: LoadedModel | None) -> None:
    """Refuse chat messages for a model known to have no chat template (it says what to do)."""
    if lm is not None:
        has = getattr(lm.tokenizer, "has_chat_template", False)
    else:
        from ...models.vocab import spec_has_chat_template

        has = spec_has_chat_template(spec)
    if has is False:
        raise ValueError(
            f"model {spec!r} has no chat template, so it cannot hold a conversation; "
            "generate from plain text instead (chat=False, %%generate --raw)"
        )


def require_same_vocab(main: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a loaded draft model whose vocabulary differs from the main model's."""
    if main.vocab_key != draft.vocab_key:
        sizes = f" ({draft.vocab_size} vs {main.vocab_size} tokens)"
        raise IncompatibleDraft(vocab_message(main.name, draft.name) + sizes)


def vocab_message(main: str, draft: str) -> str:
    """The one line naming both models of a vocabulary mismatch."""
    return (
        f"draft: model {draft!r} has a different vocabulary from main model {main!r}; "
        "a draft model must share the main model's tokenizer"
    )
