"""The worker's side of the result cache: look a job up before its first pass; keep what it made.

A job whose text is determined (greedy, or sampled with a seed; with the ``"all"``
setting any job) is looked up once its prompt is encoded and its sampling known
(`output.prepare`). A hit replays the stored run as the same events (its tokens, their
records, its text and its stats, marked ``Stats.replayed``) without a forward pass; a
miss runs as usual and is stored when it ends (``stop`` or ``length``). Settings:
``MLX_NOTEBOOK_RESULT_CACHE`` (``deterministic``, ``all`` or ``off``) and
``Request(cache=...)`` (``"off"``: neither read nor write; ``"refresh"``: regenerate and
store; ``"all"``: this request even unseeded).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ... import config
from ..events import Finished, Stats, Token
from ..job import Job
from .key import about_model, deterministic, result_key, server_key
from .store import ResultStore

MODES = ("deterministic", "all", "off")
REQUEST_MODES = ("off", "refresh", "all")


class Replays:
    """Looks jobs up in a `ResultStore` and keeps their results (worker thread only).

    Args:
        mode: ``"deterministic"`` (greedy or seeded jobs), ``"all"`` or ``"off"``.
        path: The store's file; relative paths are taken from the working directory
            when the first result is stored (a notebook's folder).
    """

    def __init__(self, mode: str = "deterministic", path: str | os.PathLike | None = None):
        if mode not in MODES:
            raise ValueError(f"result cache: must be one of {', '.join(MODES)} (got {mode!r})")
        self.mode = mode
        self.path = Path(path if path is not None else config.get("MLX_NOTEBOOK_RESULT_CACHE_PATH"))
        self._store: ResultStore | None = None

    def set_mode(self, mode: str) -> None:
        """Change what is stored and replayed from now on (`MODES`)."""
        if mode not in MODES:
            raise ValueError(f"result cache: must be one of {', '.join(MODES)} (got {mode!r})")
        self.mode = mode

    @classmethod
    def from_config(cls) -> Replays:
        """The settings of ``MLX_NOTEBOOK_RESULT_CACHE`` and ``..._PATH``."""
        return cls(config.get("MLX_NOTEBOOK_RESULT_CACHE"))

    @property
    def store(self) -> ResultStore:
        """The store, opened on first use."""
        if self._store is None:
            self._store = ResultStore(self.path.expanduser().absolute())
        return self._store

    @property
    def on(self) -> bool:
        """Whether results are stored at all (the engine's setting)."""
        return self.mode != "off"

    def _mode(self, request) -> str | None:
        """What this request does: ``"all"``, ``"deterministic"`` or None (no cache).

        ``Request.cache`` wins: ``"off"`` none, ``"all"`` every result, ``"refresh"``
        what the engine's setting stores (``deterministic`` when it is off).
        """
        if request.cache == "off":
            return None
        if request.cache == "all":
            return "all"
        if request.cache == "refresh":
            return self.mode if self.on else "deterministic"
        return self.mode if self.on else None

    def prompts_for(self, main):
        """Where ``main``'s long prompts are saved across restarts (`cache.disk`), or None.

        Beside the result cache, in a folder per model files' hash and precision (saving
        follows the setting at each save); none for a model built in code.
        """
        about = about_model(main, identify=True)
        if about["hash"] is None:
            return None
        from ..cache.disk import DiskPrompts

        tag = f"{about['hash'][:16]}-{str(about['precision']).replace('/', '_').replace(' ', '')}"
        root = self.path.expanduser().absolute().parent / "prompts" / tag
        return DiskPrompts(root, enabled=lambda: self.on)

    def lookup(self, job: Job, main, setup) -> Finished | None:
        """Replay ``job`` if its result is stored (its events emitted); else None.

        Sets ``job.replay_key`` when the job's result should be stored as it ends. The
        cache never fails a job: a stored result it cannot replay is a miss (said once).
        """
        request = job.request
        mode = self._mode(request)
        if mode is None or mode != "all" and not deterministic(setup.sampling, request.seed):
            return None
        about = about_model(main, identify=True)
        if about["hash"] is None:  # a model built in code: nothing on disk to key on
            return None
        key = result_key(
            about["hash"], about["precision"], setup.prompt, request, setup.sampling,
            setup.max_tokens,
        )  # fmt: skip
        return self._found(job, key, main.name)

    def lookup_server(self, job: Job, base_url: str, body: dict) -> Finished | None:
        """`lookup` for a server model, keyed on its URL and the request's body."""
        from ...origin import clean_url

        request = job.request
        mode = self._mode(request)
        greedy = body.get("temperature", 0.0) < 1e-5
        if mode is None or mode != "all" and not greedy and body.get("seed") is None:
            return None
        key = server_key(base_url, body)
        return self._found(job, key, f"{clean_url(base_url)}#{request.model}")

    def _found(self, job: Job, key: str, model: str) -> Finished | None:
        job.replay_key = (key, model)
        if job.request.cache == "refresh":
            return None
        payload = self.store.get(key)
        if payload is None:
            return None
        try:
            events, fin = replay_events(payload)
        except Exception as exc:  # noqa: BLE001 - a damaged or older entry: generate anew
            self.store.warn_once(f"a stored result could not be replayed ({exc!r})")
            return None
        for ev in events:
            job.emit(ev)
        return fin

    def keep(self, job: Job, fin: Finished) -> None:
        """Store ``fin`` (and the job's token events) where `lookup` asked for it."""
        found = getattr(job, "replay_key", None)
        if found is None or fin.finish_reason not in ("stop", "length") or fin.stats.replayed:
            return
        if job.thinking_ended:  # shaped by a click ("Stop thinking"): not the request's own
            return
        key, model = found
        self.store.put(key, model, fin.stats.total_s or 0.0, payload_of(job, fin))


def payload_of(job: Job, fin: Finished) -> dict:
    """What a replay needs: the token events as they streamed, and the terminal event."""
    tokens = [
        [ev.text, ev.token_id, ev.from_draft, ev.index, ev.reasoning, _record(ev.info)]
        for ev in job.events_so_far()
        if isinstance(ev, Token)
    ]
    return {
        "made": time.time(),
        "tokens": tokens,
        "text": fin.text,
        "finish_reason": fin.finish_reason,
        "matched_stop": fin.matched_stop,
        "reasoning": fin.reasoning,
        "stats": dataclasses.asdict(fin.stats),
    }


def replay_events(payload: dict) -> tuple[list[Token], Finished]:
    """The stored token events and terminal event, all built before any is emitted.

    Raises:
        Exception: The payload is damaged or of another shape (the caller generates).
    """
    events = [
        Token(text, tid, from_draft, index, reasoning, _from_record(rec))
        for text, tid, from_draft, index, reasoning, rec in payload["tokens"]
    ]
    fields = {f.name for f in dataclasses.fields(Stats)}
    stats = Stats(**{k: v for k, v in payload["stats"].items() if k in fields})
    stats.replayed = {"made": payload["made"], "seconds": payload["stats"].get("total_s")}
    fin = Finished(
        payload["text"], payload["finish_reason"], payload["matched_stop"], None, stats,
        reasoning=payload["reasoning"],
    )  # fmt: skip
    return _with_tail(events, fin), fin


def _with_tail(events: list[Token], fin: Finished) -> list[Token]:
    """The stored events, with any text they fall short of the result's on the last one.

    Events stored before the last token carried the text held back (`Output._release`)
    add up to less than the result's text; the last token carries the rest now.
    """
    if not events:
        return events
    text, thought = "".join(e.text for e in events), "".join(e.reasoning for e in events)
    if fin.text == text and fin.reasoning == thought:
        return events
    if not (fin.text.startswith(text) and fin.reasoning.startswith(thought)):
        return events  # not a stream that stopped short: left as it was
    last = dataclasses.replace(
        events[-1],
        text=events[-1].text + fin.text[len(text) :],
        reasoning=events[-1].reasoning + fin.reasoning[len(thought) :],
    )
    return [*events[:-1], last]


def _record(rec) -> dict | None:
    return None if rec is None else dataclasses.asdict(rec)


def _from_record(d: dict | None):
    if d is None:
        return None
    from ..token_records import TokenRecord  # MLX: only when a replay has records

    d = dict(d)
    d["top"] = tuple(tuple(t) for t in d.get("top", ()))
    return TokenRecord(**d)
