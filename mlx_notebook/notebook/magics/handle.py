"""Result handles bound by ``%%generate -o NAME`` and returned by `mlx_notebook.last`."""

from __future__ import annotations

from ...engine.events import Finished, Stats, Token
from ...engine.job import Job

_last: GenerationHandle | None = None


class GenerationHandle:
    """One generation's result: a future while it runs.

    Final values (`text`, `reasoning`, `stats`, `finish_reason`) wait until the
    generation has ended, so a notebook run top to bottom (Run All) reads
    finished text; Ctrl-C or ■ while waiting stops it and keeps what it wrote.
    Live values say so: `partial_text`, `partial_reasoning`, `done`.

    Args:
        job: The engine job.
        model: Model name for the repr.
        backend: Where it runs (`branch` submits there); None: it cannot branch.
        parent: ``(handle, i)`` when this is a branch of ``handle`` at token ``i``.
    """

    def __init__(self, job: Job, model: str, backend=None, parent=None) -> None:
        self.job = job
        self.model = model
        self.backend = backend
        self.parent = parent

    def _so_far(self, part: str) -> str:
        fin = self.job.finished
        if fin is not None:
            return getattr(fin, part)
        return "".join(getattr(e, part) for e in list(self.job._log) if isinstance(e, Token))

    def _final(self) -> Finished:
        fin = self.job.finished
        if fin is None:
            try:
                fin = self.job.wait()
            except KeyboardInterrupt:  # stop it, keeping its text, then let Ctrl-C through
                self.job.cancel()
                self.job.wait()
                raise
        return fin

    @property
    def text(self) -> str:
        """The whole text: waits for the generation to end (see `partial_text`)."""
        return self._final().text

    @property
    def partial_text(self) -> str:
        """The text so far, without waiting (the whole text once `done`)."""
        return self._so_far("text")

    @property
    def reasoning(self) -> str:
        """A thinking model's reasoning, apart from `text`: waits for the end."""
        return self._final().reasoning

    @property
    def partial_reasoning(self) -> str:
        """The reasoning so far, without waiting."""
        return self._so_far("reasoning")

    @property
    def done(self) -> bool:
        """Whether generation has ended."""
        return self.job.done

    @property
    def finish_reason(self) -> str:
        """``stop``, ``length``, ``cancelled`` or ``error``: waits for the end."""
        return self._final().finish_reason

    @property
    def stats(self) -> Stats:
        """Timing figures: waits for the end."""
        return self._final().stats

    @property
    def value(self):
        """The parsed value of a ``--schema``/``--choice``/``--regex`` generation: waits.

        A pydantic instance when a model class was given. Raises one line if the
        generation ended before the value was complete (`.text` keeps the part).
        """
        from ...value_check import value_of

        fin = self._final()
        return value_of(self.job.request.constraint, fin.text, fin.finish_reason)

    @property
    def valid(self) -> bool:
        """Whether the structured value is complete and follows its schema: waits."""
        return self.job.result(raise_on_error=False).valid

    @property
    def problem(self) -> str | None:
        """Why the value is not `valid`, in one line (None when it is): waits."""
        return self.job.result(raise_on_error=False).problem

    @property
    def tokens(self):
        """Per-token records (``--logprobs K`` or ``--inspect``), a `TokenTable`: waits."""
        return self.job.result(raise_on_error=False).tokens

    @property
    def perplexity(self) -> float:
        """Perplexity of the generated text (``--logprobs``): waits."""
        return self.tokens.perplexity

    def pieces(self) -> list[tuple[str, object]]:
        """``(text, record or None)`` of each generated token so far."""
        return [(e.text, e.info) for e in list(self.job._log) if isinstance(e, Token)]

    def branch(self, i: int, token: int | str | None = None, **fields) -> GenerationHandle:
        """Continue this generation from its ``i``-th token with another token.

        The prompt cache this generation left serves the prompt and its first
        ``i`` tokens: only the tokens from the branch point on are computed.
        Waits for this generation to end; the branch runs like any job.

        Args:
            i: Where to branch, in ``0..len(tokens)``.
            token: The branch's first token: an id, or the text of one token
                (``.tokens`` lists the alternatives there). None draws it again
                without this generation's token.
            **fields: `Request` fields to change (``temperature``, ``max_tokens``,
                ``logprobs``...); ``max_tokens`` defaults to what was left at ``i``.

        Returns:
            The branch's handle; ``side_by_side()`` shows both continuations.
        """
        from ...engine.branch import branch_request

        if self.backend is None:
            raise RuntimeError("branch: this handle has no engine (it was not made by a cell)")
        res = self.job.result(raise_on_error=False)
        request = branch_request(self.job.request, res.token_ids, i, token, **fields)
        job = self.backend.submit(request)
        return GenerationHandle(job, self.model, self.backend, parent=(self, i))

    def side_by_side(self):
        """A branch and its parent from the branch point on, side by side: waits."""
        from ..views.branch_view import Fork, Side

        if self.parent is None:
            raise ValueError("side_by_side: this generation is not a branch (see .branch)")
        parent, i = self.parent
        self._final()
        parent._final()
        mine, theirs = self.pieces(), parent.pieces()
        # The detokenizer holds a word back until it is complete, so the text a token
        # released may belong to earlier tokens: the records' per-token texts are the
        # shared prefix exactly (the branch feeds those tokens, never their text).
        records = [r for _, r in theirs[:i]]
        if records and all(r is not None for r in records):
            shared = "".join(r.text for r in records)
        else:
            shared = "".join(t for t, _ in theirs[:i])
        state = {"stop": "done", "length": "done"}
        return Fork(
            f"{self.model}: branched at token {i}",
            shared,
            Side("original", theirs[i:], state.get(parent.finish_reason, parent.finish_reason)),
            Side("branch", mine, state.get(self.finish_reason, self.finish_reason)),
        )

    @property
    def error(self) -> str | None:
        """Error text when ``finish_reason == "error"``: waits for the end."""
        return self._final().error

    def wait(self, timeout: float | None = None) -> GenerationHandle:
        """Block until done. Ctrl-C / kernel interrupt cancels the job and re-raises."""
        self.job.result(timeout)
        return self

    def cancel(self) -> None:
        """Stop the generation (keeps the partial text)."""
        self.job.cancel()

    def end_thinking(self) -> None:
        """A thinking model stops reasoning and answers now (the view's "Stop thinking")."""
        self.job.end_thinking()

    def finished(self) -> Finished | None:
        """The terminal event, or None."""
        return self.job.finished

    # -- display: the live view where the handle is shown ------------------------
    def _state(self):
        from ..views.render import ViewState

        r = self.job.request
        fmt = view_format(r.constraint)
        return ViewState(model=self.model, mode=r.mode, k=r.num_draft_tokens, fmt=fmt)

    def _ipython_display_(self) -> None:
        """In a notebook: the live view (Stop, streaming), a document once it ended."""
        from ..views.view import generation_view

        generation_view(self._state()).display().attach(self.job)

    def _display_(self):
        """In marimo: the live view's widget (an anywidget, which marimo shows as its own)."""
        from ..views.view import generation_view

        done = self.job.done
        view = generation_view(self._state(), start_thread=not done).attach(self.job)
        if done:  # the end at once: the widget's state is what marimo saves or exports
            view.finish()
        return view.widget

    def _repr_html_(self) -> str:
        """The view as it stands, as static HTML (front ends without live widgets)."""
        state = self._state()
        for ev in self.job.events_so_far():
            state.apply(ev)
        return state.html()

    def __repr__(self) -> str:
        fin = self.job.finished
        state = fin.finish_reason if fin else "running" if self.job.position is None else "queued"
        text = self.partial_text
        short = text if len(text) <= 60 else text[:57] + "..."
        return f"<Generation {self.model!r} {state}, {len(text)} chars: {short!r}>"


def view_format(schema) -> str:
    """How a view shows a text made under ``schema`` (what ``%%generate`` picks without ``-f``).

    JSON for a JSON schema, plain text for a choice or a pattern, else markdown.
    """
    kind = getattr(schema, "kind", None)
    return {"json": "json", None: "markdown"}.get(kind, "text")


def remember(handle: GenerationHandle) -> None:
    """Record the most recent handle."""
    global _last
    _last = handle


def last_handle() -> GenerationHandle | None:
    """The most recent handle, or None."""
    return _last
