"""Prompt-cache reuse: several KV caches per model, each with the exact tokens it holds.

A conversation, a second conversation and a one-off generation can all keep
their caches: `fetch` picks the entry sharing the longest prefix with the new
prompt, so each turn of a chat prefills only what is new. Entries never alias:
an entry that is a prefix of the new prompt is taken out (the job extends it,
and it comes back longer); one that must be trimmed is copied first, so the
original stays for its own conversation. The least recently used entries go
when the byte budget is exceeded.

A cache that cannot be trimmed (a sliding window past its length, recurrent
state) serves only prompts that extend everything it holds: it never hands
out a state with tokens the new prompt lacks. So that a chat's next turn still
finds one, the state at the end of each prompt is kept too (`keep_prompt`):
the next turn extends it even when the reply re-tokenizes differently.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ... import config
from ..decoding.prefill import PrefillProfile
from ..decoding.suffix import SuffixIndex
from ..events import Notice
from .disk import MIN_TOKENS
from .sequence import CachedSequence, common_prefix

SUFFIX_TOKENS = 100_000  # tokens of earlier prompts and outputs kept per model

BYTES_ENV = "MLX_NOTEBOOK_PROMPT_CACHE_MB"


def available_memory() -> int | None:
    """Bytes of memory available now (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:  # macOS and others: a quarter of physical memory is a fair guess of free
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (AttributeError, ValueError, OSError):
        return None


def default_budget() -> int:
    """``$MLX_NOTEBOOK_PROMPT_CACHE_MB`` if set, else a quarter of the memory available."""
    env = config.get(BYTES_ENV)
    if env != "auto":
        return int(float(env) * 2**20)
    free = available_memory()
    return free // 4 if free else 2**30


class PromptCache:
    """One model's reusable KV caches: an LRU of `CachedSequence` entries within a budget.

    Caches that cannot be trimmed (rotating or recurrent ones) are reused only
    where the new prompt extends all they hold.

    Args:
        max_bytes: Byte budget of all entries; `default_budget` when None.
        max_entries: Most entries kept.
        disk: Long prompts' states saved on disk (`disk.DiskPrompts`), kept across
            restarts; None: memory only.
    """

    def __init__(self, max_bytes: int | None = None, max_entries: int = 32, disk=None) -> None:
        self.max_bytes = default_budget() if max_bytes is None else max_bytes
        self.max_entries = max_entries
        self.disk = disk
        self._entries: OrderedDict[int, CachedSequence] = OrderedDict()  # oldest first
        # The worker changes the entries; status readers on other threads count them.
        self._lock = threading.Lock()
        self.hits = 0  # prompt tokens reused, over all fetches
        self.copies = 0  # entries copied to keep the original

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held by all entries."""
        with self._lock:
            return sum(s.nbytes for s in self._entries.values())

    @property
    def entries(self) -> list[list[int]]:
        """The token lists held, least recently used first."""
        with self._lock:
            return [list(s.tokens) for s in self._entries.values()]

    def fetch(self, model, tokens: Sequence[int], reuse: bool = True) -> tuple[CachedSequence, int]:
        """A sequence for a job on ``tokens``: the best entry's cache, or a fresh one.

        Returns:
            ``(seq, reused)``: ``seq`` holds ``tokens[:reused]``; at least the last
            prompt token is always left to compute. ``seq`` belongs to the job
            until `store` takes it back.
        """
        best, best_len, limit = None, 0, len(tokens) - 1
        if reuse:
            for key, seq in self._entries.items():
                if seq.model is not model:
                    continue
                n = min(common_prefix(seq.tokens, tokens), limit)
                if n < len(seq.tokens) and not seq.trimmable:
                    continue  # it holds tokens the prompt lacks, and cannot drop them
                if n > best_len:
                    best, best_len = key, n
        keep = best_len
        if reuse and self.disk is not None:  # a longer prefix saved before a restart?
            name, n = self.disk.best(list(tokens), limit)
            if n > keep and (saved := self.disk.load(name, model)) is not None:
                try:
                    saved.trim_to(n)
                except Exception:  # noqa: BLE001 - it cannot go back that far: prefill
                    saved = None
                if saved is not None:
                    self.hits += n
                    return saved, n
        if best is None or keep <= 0:
            return CachedSequence(model), 0
        seq = self._entries[best]
        if len(seq.tokens) <= keep:  # a prefix of the prompt: extend it in place
            with self._lock:
                del self._entries[best]
        else:  # trimming would lose the rest of its conversation: work on a copy
            seq = seq.copy()
            self.copies += 1
        seq.trim_to(keep)
        self.hits += keep
        return seq, keep

    def store(self, seq: CachedSequence) -> None:
        """Keep ``seq`` (if consistent); drop entries it makes redundant."""
        seq.settle()
        if not seq.consistent() or not seq.tokens:
            return
        with self._lock:
            for key, other in list(self._entries.items()):
                if other is seq or other.model is not seq.model:
                    continue
                # A prefix of the new entry only takes space when the new one can be
                # trimmed back to it (an untrimmable one covers only the same tokens).
                n = common_prefix(other.tokens, seq.tokens)
                if n == len(other.tokens) and (seq.trimmable or n == len(seq.tokens)):
                    del self._entries[key]
            self._entries[id(seq)] = seq
            self._entries.move_to_end(id(seq))
            self._evict()

    def keep_prompt(self, seq: CachedSequence, persist: bool = False) -> None:
        """Keep the state at the end of a prompt when ``seq`` will not be trimmable.

        Full-attention caches need nothing: whatever ``seq`` holds at the end trims
        back to any prefix. A copy shares the arrays until either side writes.
        """
        if not seq.rewinds_anywhere and seq.tokens:
            self.store(seq.snapshot())
        if persist and self.disk is not None and seq.consistent():
            self._save(seq)

    def _save(self, seq: CachedSequence) -> None:
        """Save a long prompt's state on disk unless a saved one covers most of it."""
        tokens = list(seq.tokens[: seq.held])
        _, covered = self.disk.best(tokens, len(tokens))
        if len(tokens) >= MIN_TOKENS and covered < 0.75 * len(tokens):
            self.disk.save(seq.snapshot())  # the job's own sequence goes on untouched

    def resize(self, max_bytes: int) -> None:
        """Change the budget, evicting at once if needed."""
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()

    def _evict(self) -> None:
        # Called with the lock held.
        def size() -> int:
            return sum(s.nbytes for s in self._entries.values())

        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        while len(self._entries) > 1 and size() > self.max_bytes:
            self._entries.popitem(last=False)
        if self._entries and size() > self.max_bytes:
            self._entries.clear()  # one entry alone over budget: keep nothing


def persists(request) -> bool:
    """Whether a request's prompt state is worth saving across restarts (`disk`).

    A conversation (messages, or a system prompt) comes back after a restart with the
    same beginning; one-off prompts and rows of a map are replayed whole instead.
    """
    if request.cache == "off":
        return False
    return bool(request.chat) and (
        request.system is not None or not isinstance(request.prompt, str)
    )


@dataclass
class ModelState:
    """What the engine keeps per loaded model between jobs (dropped with the model).

    Attributes:
        cache: Its reusable KV caches.
        prefill: What its prefill chunks cost, for sizing them.
        suffix: Its earlier prompts and outputs, for suffix drafting.
    """

    cache: PromptCache = field(default_factory=PromptCache)
    prefill: PrefillProfile = field(default_factory=PrefillProfile)
    suffix: SuffixIndex = field(default_factory=lambda: SuffixIndex(SUFFIX_TOKENS))
    _unbatchable: tuple | None = field(default=None, repr=False)
    _padding: tuple | None = field(default=None, repr=False)
    _multi: tuple | None = field(default=None, repr=False)
    _window: int | None = field(default=None, repr=False)
    _checking: bool = field(default=False, repr=False)

    def unbatchable(self, model) -> str | None:
        """The first cache kind of ``model`` that cannot join a batch, or None (found once)."""
        if self._unbatchable is None:
            from mlx_lm.models.cache import make_prompt_cache

            from .caches import unbatchable

            self._unbatchable = (unbatchable(make_prompt_cache(model)),)
        return self._unbatchable[0]

    def padding_problem(self, main, tables=()) -> str | None:
        """Why ``main`` cannot prefill padded rows together, or None (checked once).

        Worker thread only. A check that fails to run counts as a problem (see
        `batch_failure`): the rows then run alone, which is always exact.
        """
        if self._padding is None:
            from .padding import check_batching

            try:
                prefill, decoding = check_batching(main.model, main.vocab_size, tables)
                self._padding = (prefill or decoding, decoding)
            except Exception as exc:  # noqa: BLE001 - the safe way round
                why = f"its batched forward pass failed ({type(exc).__name__}: {exc})"
                self._padding = (why, why)
        return self._padding[0]

    def multi_token_problem(
        self, main, tables=(), between=lambda: None, before=lambda: None
    ) -> str | None:
        """Why verifying drafts on ``main`` would change its text, or None (checked once).

        Worker thread only. ``before`` is called when the check is about to run,
        ``between`` between its prefill chunks (a cancel point: other jobs' calls and
        steps run there). A check that fails counts as a problem; one stopped by what
        ``between`` raises runs again next time. Asked again from inside the check (a
        job admitted at one of its cancel points), it answers "a problem" for now:
        the safe way round, and not remembered.
        """
        if self._multi is None:
            if self._checking:
                return "the check of a multi-token pass is still running"
            from .padding import multi_token_problem

            before()
            raised: list[BaseException] = []

            def guarded() -> None:
                try:
                    between()
                except BaseException as exc:
                    raised.append(exc)
                    raise

            self._checking = True
            try:
                self._multi = (multi_token_problem(main.model, main.vocab_size, tables, guarded),)
            except Exception as exc:  # noqa: BLE001 - the safe way round: no drafts
                if raised:
                    raise  # a Stop, or other jobs' work between the chunks: not the check's
                self._multi = (f"the check of a multi-token pass failed ({exc})",)
            finally:
                self._checking = False
        return self._multi[0]

    def prefill_grid(
        self, main, n: int, tables=(), before=lambda: None, between=lambda: None
    ) -> tuple[int, int]:
        """``(window, grid)`` for prefilling ``n`` tokens on ``main`` (`ChunkSizer`).

        ``(0, 0)``: chunks may end anywhere. A model whose caches keep a sliding
        window and whose passes over several tokens differ from single steps
        (mlx-lm's plamo3) gives text that depends on where a chunk begins once its
        window is full: past the window its chunks end where mlx-lm's
        ``generate_step`` ends its passes, whatever the time they take. Checked once
        per model, at its first prompt longer than its window (`multi_token_problem`:
        ``before`` is called first, when the check runs; ``between`` inside it).

        Worker thread only.
        """
        if self._window is None:
            from .padding import sliding_window

            self._window = sliding_window(main.model)
        if not self._window or n - 1 <= self._window:  # every chunk ends short of it
            return 0, 0
        if self.multi_token_problem(main, tables, between, before) is None:
            return 0, 0
        return self._window, prefill_step()

    def checking(self, main) -> Notice:
        """What a job hears while `multi_token_problem` checks its model (once, seconds)."""
        from .padding import check_length, sliding_window

        w = sliding_window(main.model) if self._window is None else self._window
        past = f" past its {w}-token window" if check_length(w) > w > 0 else ""
        return Notice(
            f"{main.name}: checking once whether a pass over several tokens equals single"
            f" steps{past} (two prefills of {check_length(w)} tokens)"
        )

    def batch_failure(self, main, tables=()) -> str | None:
        """Why ``main`` cannot run rows batched at all (its batched pass raised), or None."""
        self.padding_problem(main, tables)
        return None if self._padding is None else self._padding[1]

    @property
    def layout(self) -> str | None:
        """What `%mlx status` says about this model's prefill chunks, where it matters."""
        if self._window and self._multi is not None and self._multi[0] is not None:
            return (
                f"chunks past its {self._window}-token window end every {prefill_step()}"
                " tokens, as mlx-lm's prefill does (a pass over several tokens differs"
                " from single steps there)"
            )
        return None

    @property
    def drafts(self) -> str | None:
        """What `%mlx status` says about speculation on this model, once it is known."""
        if self._multi is None:
            return None
        if self._multi[0] is None:
            return "drafts verified in one pass (checked against single steps)"
        return f"decodes without drafts: {self._multi[0]}"

    @property
    def batching(self) -> str | None:
        """What `%mlx status` says about this model's batching, once it is known."""
        if self._unbatchable is not None and self._unbatchable[0] is not None:
            return f"runs alone: its {self._unbatchable[0]} layers cannot join a batch"
        if self._padding is None:
            return None
        if self._padding[1] is not None:
            return f"runs alone: {self._padding[1]}"
        if self._padding[0] is None:
            return "rows decode together; short prompts prefill together (padding checked)"
        return f"rows decode together; prompts prefill one at a time: {self._padding[0]}"


def prefill_step() -> int:
    """Where mlx-lm's ``generate_step`` ends its prefill passes (its ``prefill_step_size``)."""
    import inspect

    from mlx_lm.generate import generate_step

    default = inspect.signature(generate_step).parameters["prefill_step_size"].default
    return int(default) if isinstance(default, int) else 2048
