"""What a backend reports: its models, jobs and device (`ModelInfo`, `EngineInfo`, `Unloaded`).

Plain data with no engine behind it, so the local and remote engines and the
notebook layer can all use it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelInfo:
    """One model a backend has loaded (or a server offers).

    Attributes:
        name: Canonical name or id.
        path: Local path, if any.
        memory_mb: Memory of its weights, when known.
        dtype: Parameter dtype, when known.
        vocab_size: Tokens in its vocabulary, when known.
        fast_path: What the CPU fast path swapped in it, if anything.
        defaults: Sampling its ``generation_config.json`` sets, used where a
            request leaves a field unset.
    """

    name: str
    path: str | None = None
    memory_mb: float | None = None
    dtype: str | None = None
    vocab_size: int | None = None
    fast_path: tuple[str, ...] = ()
    defaults: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class EngineInfo:
    """What a backend reports about itself.

    Attributes:
        kind: ``"local"`` or ``"remote"``.
        device: Where generation runs: ``"cpu"``, ``"gpu (Metal)"``, or the server URL.
        worker_alive: Whether jobs can run.
        running: Id of the job running alone, if any.
        queued: Jobs waiting.
        batched: Ids of the jobs decoding together in the batch.
        models: Loaded models (local) or the models the server offers (remote).
        notes: Other lines worth showing (acceleration, prompt caches, server).
        closed: Why the backend is closed, or None while it is open.
    """

    kind: str
    device: str
    worker_alive: bool
    running: int | None = None
    queued: int = 0
    models: tuple[ModelInfo, ...] = ()
    batched: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    closed: str | None = None

    def format(self) -> str:
        """Human-readable status, as ``%mlx status`` prints it.

        What a user needs first (models, jobs, device), then how it is accelerated
        and what it caches.
        """
        lines = ["models:" if self.models else "models: none loaded"]
        for m in self.models:
            bits = [m.name]
            if m.dtype:
                bits.append(m.dtype)
            if m.memory_mb is not None:
                bits.append(f"{m.memory_mb} MB")
            if m.fast_path:
                bits.append("fast path: " + ", ".join(m.fast_path))
            if self.kind == "local":
                bits.append("sampling by default: " + sampling_text(m.defaults))
            lines.append("  " + "  ".join(bits))
        lines += [
            f"backend: {self.kind}; worker: {'alive' if self.worker_alive else 'stopped'}; "
            f"running job: {self.running if self.running is not None else 'none'}; "
            f"queued: {self.queued}",
            f"device: {self.device}",
        ]
        if self.closed:
            lines.append(f"closed: {self.closed}")
        if self.notes:
            lines += ["details:", *("  " + n for n in self.notes)]
        return "\n".join(lines)


def sampling_text(defaults: dict) -> str:
    """A model's own sampling (its ``generation_config.json`` values), in words."""
    from .defaults import FALLBACK, describe

    if not defaults:
        return "greedy (no generation_config.json sampling)"
    values = {**FALLBACK, **defaults, "from_model": list(defaults)}
    return describe(values)  # "... (model defaults)": its file, or the bundled model's card


@dataclass
class Unloaded:
    """What `Engine.unload` did.

    Attributes:
        names: The models unloaded.
        cancelled: Ids of the jobs cancelled because they used those models.
        note: Why nothing could be unloaded, if that is the case.
    """

    names: list[str] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    note: str = ""

    def message(self) -> str:
        """One line for ``%mlx unload``."""
        if not self.names:
            return f"nothing to unload ({self.note})" if self.note else "nothing to unload"
        msg = f"unloaded: {', '.join(self.names)}"
        if self.cancelled:
            ids = ", ".join(map(str, self.cancelled))
            msg += f" (cancelled {len(self.cancelled)} job(s) using it: {ids})"
        return msg
