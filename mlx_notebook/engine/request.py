"""What to generate: the `Request` dataclass and its validation."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

LOOKUP = "lookup"
SHORTHANDS = (LOOKUP, "suffix")  # `draft` values that name a kind, not a model
DRAFT_KINDS = ("none", "lookup", "suffix", "model")
_MODES = {"none": "normal", "lookup": "lookup", "suffix": "suffix", "model": "draft"}
MIN_TEMPERATURE = 1e-4
"""Temperatures below this are treated as 0 (greedy): 1/T would overflow float32."""


DEFAULT_MAX_TOKENS = 256  # every entry point's default (cells, Panel, chat window)


@dataclass
class Request:
    """One generation request.

    Args:
        prompt: A string, or chat messages (``[{"role": ..., "content": ...}]``).
        model: Model spec: ``"default"``, a local directory, a ``.gguf`` file or a hub id.
        system: Optional system prompt (chat mode only).
        chat: Apply the tokenizer's chat template. Default: True.
        max_tokens: Most tokens to generate. Default: 256.
        temperature: 0 means greedy; values below `MIN_TEMPERATURE` count as 0.
        top_p: Nucleus sampling in (0, 1]; 1 disables it.
        top_k: Keep the k most likely tokens; 0 disables it.
        min_p: Min-p sampling in [0, 1); 0 disables it.
        repetition_penalty: Multiplicative penalty (> 0); 1 disables it.
            These five sampling fields default to None: the model's own value from
            its ``generation_config.json``, else greedy with no filter or penalty
            (`defaults`). An explicit value always wins.
        seed: Seed for MLX's random generator, in [0, 2**64); the same seed gives
            the same text.
        stop: Stop strings. Generation ends before the first one; it is not emitted.
        draft: Draft model spec (``draft_kind="model"``). ``"lookup"`` and
            ``"suffix"`` are accepted for those kinds; a spec alone implies ``"model"``.
        draft_kind: Where drafts come from: ``"none"``, ``"lookup"`` (the prompt),
            ``"suffix"`` (this job and the session's earlier jobs) or ``"model"``.
        num_draft_tokens: Tokens drafted per step, 1..16 (for ``suffix``, the cap
            of its adaptive length). Default: 3.
        lookup_ngram: n-gram size for prompt lookup, 1..8. Default: 3.
        prefill_target_s: Seconds of compute between prefill's cancel points (chunks,
            or layers inside a chunk where the cache can roll one back), which bounds
            the cancel latency during prefill. Default: 0.25.
        reuse_cache: Reuse the model's KV cache from earlier jobs for a common
            prompt prefix. False prefills from scratch (fair timing comparisons).
        remember: Add this job's prompt and output to the model's session index for
            later suffix drafting. Compare and Sweep turn it off so their repeated
            runs do not teach each other the answer.
        batch: Decode together with other jobs on the same model when the engine
            batches (the default). False runs the job alone, as Compare and Sweep
            do for their timed runs. Speculative jobs always run alone.
        think: A reasoning model's thinking switch (the chat template's
            ``enable_thinking`` or its equivalent): True or False; None keeps the
            template's own default. The reply's reasoning comes apart from its
            answer (`Finished.reasoning`).
        schema: What the text must be (`mlx_notebook.schema.Schema.of`): a JSON
            Schema dict, a pydantic model class, a Python type, a list of choices,
            or a `Schema` (``Schema.regex``, ``Schema.lark``). Enforced token by
            token; ``Result.value`` parses the finished text.
        logprobs: Record each token's log-probability, rank, entropy, source
            and this many top alternatives (0..20); ``Result.tokens``. None
            (the default) computes nothing.
        branch_from: Continue another generation from one of its tokens
            (`branch.BranchPoint`; built by `branch.branch_request`).
        cache: The result cache for this request: None follows the engine's setting
            (``MLX_NOTEBOOK_RESULT_CACHE``: greedy and seeded results are stored and
            replayed); ``"off"`` neither reads nor stores; ``"refresh"`` generates
            anew and stores the result; ``"all"`` also stores and replays unseeded
            sampling (its first sample).
    """

    prompt: str | Sequence[dict[str, Any]]
    model: str = "default"
    system: str | None = None
    chat: bool = True
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    draft: str | None = None
    draft_kind: str = "none"
    num_draft_tokens: int = 3
    lookup_ngram: int = 3
    prefill_target_s: float = 0.25
    reuse_cache: bool = True
    remember: bool = True
    batch: bool = True
    think: bool | None = None
    schema: Any = None
    logprobs: int | None = None
    branch_from: Any = None
    cache: str | None = None

    @property
    def constraint(self):
        """The normalized `Schema`, or None (raises `SchemaError` for a bad one)."""
        if self.schema is None:
            return None
        cached = self.__dict__.get("_constraint")
        if cached is not None and cached[0] is self.schema:
            return cached[1]
        from ..schema import Schema

        normalized = Schema.of(self.schema)  # compiled once per schema object
        self.__dict__["_constraint"] = (self.schema, normalized)
        return normalized

    @property
    def kind(self) -> str:
        """The draft kind, with the shorthands of `draft` resolved."""
        if self.draft_kind != "none":
            return self.draft_kind
        if self.draft is None:
            return "none"
        return self.draft if self.draft in SHORTHANDS else "model"

    @property
    def mode(self) -> str:
        """``"normal"``, ``"lookup"``, ``"suffix"`` or ``"draft"`` (a draft model)."""
        return _MODES.get(self.kind, self.kind)

    @property
    def greedy(self) -> bool:
        """Whether sampling is greedy (temperatures below `MIN_TEMPERATURE` count as 0).

        An unset temperature counts as greedy here; on a model whose defaults
        sample, the job's ``stats.sampling`` says what was in force.
        """
        t = self.temperature
        return t is None or (_is_num(t) and t < MIN_TEMPERATURE)

    def with_defaults(self, defaults: dict) -> Request:
        """A copy with the unset sampling fields taken from ``defaults``, then fallbacks."""
        from .defaults import in_force

        values = in_force(self, defaults)
        values.pop("from_model")
        return replace(self, **values)

    def validate(self) -> None:
        """Check every field; raise `ValueError` naming the first bad one.

        Normalizes in place: an iterable of messages becomes a list (so it can be
        read again), and a single stop string becomes a one-item list.
        """

        def bad(name: str, why: str) -> ValueError:
            value = repr(getattr(self, name))
            if len(value) > 80:
                value = value[:77] + "..."
            return ValueError(f"{name}: {why} (got {value})")

        self._validate_prompt(bad)
        if not isinstance(self.model, str) or not self.model.strip():
            raise bad("model", "must be a non-empty spec")
        if self.system is not None:
            if not isinstance(self.system, str):
                raise bad("system", "must be a string")
            _check_unicode("system", self.system)
        if not _is_int(self.max_tokens) or self.max_tokens <= 0:
            raise bad("max_tokens", "must be a positive integer")
        if self.temperature is not None and (not _is_num(self.temperature) or self.temperature < 0):
            raise bad("temperature", "must be >= 0")
        if self.top_p is not None and (not _is_num(self.top_p) or not 0 < self.top_p <= 1):
            raise bad("top_p", "must be in (0, 1]")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 0):
            raise bad("top_k", "must be an integer >= 0")
        if self.logprobs is not None and (
            not _is_int(self.logprobs) or not 0 <= self.logprobs <= 20
        ):
            raise bad("logprobs", f"must be in 0..20 (got {self.logprobs!r})")
        if self.min_p is not None and (not _is_num(self.min_p) or not 0 <= self.min_p < 1):
            raise bad("min_p", "must be in [0, 1)")
        if self.repetition_penalty is not None and (
            not _is_num(self.repetition_penalty) or self.repetition_penalty <= 0
        ):
            raise bad("repetition_penalty", "must be > 0")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**64):
            raise bad("seed", "must be an integer in [0, 2**64)")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.stop, (list, tuple)):
            raise bad("stop", "must be a string or a list of strings")
        self.stop = list(self.stop)
        if not all(isinstance(s, str) and s for s in self.stop):
            raise bad("stop", "must be a list of non-empty strings")
        for s in self.stop:
            _check_unicode("stop", s)
        if self.draft is not None and (not isinstance(self.draft, str) or not self.draft):
            raise bad("draft", "must be a model spec or 'lookup'")
        if self.draft_kind not in DRAFT_KINDS:
            raise bad("draft_kind", f"must be one of {', '.join(DRAFT_KINDS)}")
        kind = self.kind
        if kind == "model" and (self.draft is None or self.draft in SHORTHANDS):
            raise bad("draft", "draft_kind 'model' needs a draft model spec")
        if kind in SHORTHANDS and self.draft not in (None, kind):
            raise bad("draft", f"a draft model spec does not go with draft_kind {kind!r}")
        self.draft_kind = kind
        if kind != "model":
            self.draft = None
        if not _is_int(self.num_draft_tokens) or not 1 <= self.num_draft_tokens <= 16:
            raise bad("num_draft_tokens", "must be in 1..16")
        if not _is_int(self.lookup_ngram) or not 1 <= self.lookup_ngram <= 8:
            raise bad("lookup_ngram", "must be in 1..8")
        if not isinstance(self.batch, bool):
            raise bad("batch", "must be True or False")
        if self.think is not None and not isinstance(self.think, bool):
            raise bad("think", "must be True, False or None")
        if not _is_num(self.prefill_target_s) or self.prefill_target_s <= 0:
            raise bad("prefill_target_s", "must be > 0")
        if self.cache not in (None, "off", "refresh", "all"):
            raise bad("cache", "must be None, 'off', 'refresh' or 'all'")
        if self.branch_from is not None:
            from .branch import BranchPoint

            if not isinstance(self.branch_from, BranchPoint):
                raise bad("branch_from", "must be a BranchPoint (see branch_request)")
            self.branch_from.check()
            if self.schema is not None:
                raise bad("branch_from", "does not go with a schema")
        self.constraint  # noqa: B018 - a bad schema raises SchemaError, a ValueError, here

    def _validate_prompt(self, bad) -> None:
        prompt = self.prompt
        if isinstance(prompt, str):
            if not prompt.strip():
                raise bad("prompt", "must not be empty")
            _check_unicode("prompt", prompt)
            return
        if isinstance(prompt, (bytes, dict)) or not isinstance(prompt, Iterable):
            raise bad("prompt", "must be a string or a list of chat messages")
        msgs = self.prompt = list(prompt)  # an iterator would be used up by this check
        if not msgs:
            raise bad("prompt", "must not be empty")
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise bad("prompt", "chat messages need 'role' and 'content'")
            if not isinstance(m["role"], str) or not isinstance(m["content"], str):
                raise bad("prompt", "a chat message's 'role' and 'content' must be strings")
            _check_unicode("prompt", m["content"])
        if not self.chat:
            raise bad("chat", "chat messages need chat=True")


def _check_unicode(name: str, text: str) -> None:
    # A lone surrogate (e.g. from a bad decode) cannot be tokenized; say where it is.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name}: contains an unpaired surrogate {text[exc.start]!r} at index {exc.start}; "
            "the text must be valid Unicode"
        ) from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))
