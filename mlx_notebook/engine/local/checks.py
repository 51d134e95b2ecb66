"""Checks of a request against the models it names, on the caller's thread.

No MLX work happens here: only MLX's device is read (`needs.refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...models.needs import refusal
from ...models.registry import LoadedModel, Registry
from ...models.spec import ModelUnavailable, require_available
from ...models.vocab import spec_fingerprint
from ..decoding.prompt import check_top_k, encode_prompt, fit_context, lowered
from ..errors import IncompatibleDraft
from ..request import Request


@dataclass(frozen=True)
class Checked:
    """What `check_request` learned on the caller's thread; the job carries it to the worker.

    Attributes:
        key: The registry name the main model is (or will be) loaded under.
        draft_key: The same for a draft model, or None.
        prompt: The prompt's token ids, when the model was loaded at submit (else None:
            the worker encodes it once, with the model it loads).
        tokenizer: The tokenizer ``prompt`` was encoded with (the worker reuses the ids
            only with that very tokenizer).
        max_tokens: ``max_tokens`` fitted to the context window (with ``prompt``).
        notices: What the worker should say when the job starts (a lowered budget).
    """

    key: str
    draft_key: str | None = None
    prompt: tuple[int, ...] | None = None
    tokenizer: object = None
    max_tokens: int | None = None
    notices: tuple[str, ...] = ()


def check_request(request: Request, registry: Registry) -> Checked:
    """Everything `Engine.submit` checks before queuing; each spec resolved once.

    Loaded models are checked in full (and the prompt encoded once, for the worker);
    others, where their files allow.

    Raises:
        ValueError: Naming the field or the problem, in one line.
    """
    request.validate()
    lm = registry.peek(request.model)
    key = lm.name if lm is not None else require_available(request.model, "-m")
    draft = draft_key = None
    if request.mode == "draft":
        draft = registry.peek(request.draft)
        draft_key = draft.name if draft is not None else require_available(request.draft, "--draft")
    for k, loaded in ((key, lm), (draft_key, draft)):
        # A load already found it cannot run on this device, or its files say so.
        if k is not None and loaded is None and (why := registry.refused(k) or refusal(k)):
            raise ModelUnavailable(why)
    if request.mode == "draft":
        check_draft(request, lm, draft)
    if not isinstance(request.prompt, str) and request.chat:
        require_chat_template(request.model, lm)
    if lm is None:
        return Checked(key, draft_key)
    ids = encode_prompt(request, lm.tokenizer)
    max_tokens = fit_context(len(ids), request.max_tokens, lm.context_length, lm.name)
    width = lm.logits_size or lm.vocab_size
    check_top_k(request.top_k, width, lm.name)
    if request.constraint is not None:
        check_writable(request.constraint, lm.tokenizer, width)
    notices = ()
    if max_tokens < request.max_tokens:
        notices = (lowered(request.max_tokens, max_tokens, len(ids), lm.context_length),)
    return Checked(key, draft_key, tuple(ids), lm.tokenizer, max_tokens, notices)


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


def check_draft(request: Request, main: LoadedModel | None, draft: LoadedModel | None) -> None:
    """Refuse a draft model whose vocabulary differs, from loaded models or files."""
    keys = []
    for spec, lm in ((request.model, main), (request.draft, draft)):
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
