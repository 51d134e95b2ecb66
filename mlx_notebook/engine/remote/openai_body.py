"""A `Request` as the JSON body of an OpenAI-compatible completion request."""

from __future__ import annotations

from ..request import Request

__all__ = ["body"]


def body(req: Request) -> dict:
    """The JSON body of ``req`` for the server."""
    b: dict = {
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": req.max_tokens,
        # Unset sampling fields are sent as greedy, unfiltered: the server's own
        # defaults are its command line's, not the model's.
        "temperature": 0.0 if req.greedy else req.temperature,
        "top_p": 1.0 if req.top_p is None else req.top_p,
    }
    if req.model and req.model != "default":
        b["model"] = req.model
    if req.top_k:
        b["top_k"] = req.top_k
    if req.min_p:
        b["min_p"] = req.min_p
    if req.repetition_penalty not in (None, 1, 1.0):
        b["repetition_penalty"] = req.repetition_penalty
    if req.seed is not None:
        b["seed"] = req.seed
    if req.stop:
        b["stop"] = list(req.stop)
    if req.schema is not None:
        from ...schema import response_format

        b["response_format"] = response_format(req.constraint)
    if req.logprobs is not None:
        from .logprobs import request_fields

        b.update(request_fields(req.logprobs))
    if req.mode == "draft":
        b["draft_model"] = req.draft
        b["num_draft_tokens"] = req.num_draft_tokens
    prompt = req.prompt
    if req.chat:
        msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if req.system:
            msgs = [{"role": "system", "content": req.system}, *msgs]
        b["messages"] = msgs
    else:
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        b["prompt"] = f"{req.system}\n\n{text}" if req.system else text
    return b
