"""Model specs: ``"default"``, a local directory, a ``.gguf`` file or a hub id."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT = "default"
# ``default:q4`` and ``default:f32`` pick a precision of the bundled model (the GGUF's
# own 4-bit, or float32); plain ``default`` picks the device's best (`default_variant`).
VARIANTS = {"q4": "q", "f32": "f32"}


class ModelNotFound(RuntimeError):
    """A spec that names no local model and could not be fetched.

    Args:
        spec: The hub id.
        reason: Why fetching failed (one line).
        flag: The option that named the model, for the advice (``-m`` or ``--draft``).
    """

    def __init__(self, spec: str, reason: str, flag: str = "-m") -> None:
        self.spec, self.reason, self.flag = spec, reason, flag
        role = "draft model" if flag == "--draft" else "model"
        default = " or use -m default for the bundled SmolLM2-135M-Instruct" if flag == "-m" else ""
        super().__init__(
            f"could not fetch {role} {spec!r} from the Hugging Face hub ({reason}). "
            "Without network access, pass a local path instead: an MLX model directory "
            f"(config.json + *.safetensors) or a .gguf file, e.g. {flag} /path/to/model"
            f"{default}."
        )

    def for_flag(self, flag: str) -> ModelNotFound:
        """The same error, advising ``flag``."""
        return ModelNotFound(self.spec, self.reason, flag)


@dataclass(frozen=True)
class Spec:
    """A resolved model spec.

    Attributes:
        kind: ``"default"``, ``"dir"``, ``"gguf"`` or ``"hub"``.
        key: Canonical name: absolute path for local files, else the spec.
        path: Local path, or None for the default model and hub ids.
    """

    kind: str
    key: str
    path: Path | None = None
    variant: str | None = None


def resolve(spec: str) -> Spec:
    """Resolve ``spec`` in order: default, directory, .gguf file, hub id.

    Raises:
        FileNotFoundError: A path-like spec that does not exist.
    """
    spec = spec.strip()
    if spec == DEFAULT:
        return Spec("default", DEFAULT)
    if spec.startswith(DEFAULT + ":"):
        name = spec.split(":", 1)[1]
        if name not in VARIANTS:
            raise ValueError(
                f"model: {spec!r}: the bundled model comes as default:q4 or default:f32"
            )
        return Spec("default", spec, variant=VARIANTS[name])
    p = Path(os.path.expanduser(spec))
    if p.is_dir():
        return Spec("dir", str(p.resolve()), p.resolve())
    if p.is_file():
        if p.suffix.lower() == ".gguf":
            return Spec("gguf", str(p.resolve()), p.resolve())
        raise ValueError(f"model: {spec!r} is a file but not a .gguf file")
    if _looks_like_path(spec):
        raise FileNotFoundError(f"model: no such file or directory: {spec!r}")
    return Spec("hub", spec)


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", "./", "../", "~", "\\"))
        or spec.lower().endswith(".gguf")
        or spec.count("/") > 1
        or os.sep in spec
        and not _hub_like(spec)
    )


def _hub_like(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts)


class ModelCannotRun(RuntimeError):
    """A model that loads but fails its first forward pass on this device.

    Attributes:
        key: The model's canonical name.
        reason: Why, in one line.
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason


class ModelUnavailable(ValueError):
    """A model spec refused at submit: nothing local by that name, and no way to fetch it."""


_NET: dict = {}  # host -> (checked at, reachable)


def hub_reachable(host: str = "huggingface.co", timeout: float = 1.5) -> bool:
    """Whether the hub can be fetched from: not offline by setting, and its name resolves.

    Answered within ``timeout`` seconds and remembered for a minute, so a submit on
    the notebook's thread never waits long.
    """
    import socket
    import threading
    import time

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    seen = _NET.get(host)
    if seen is not None and time.monotonic() - seen[0] < 60:
        return seen[1]
    found: list[bool] = []

    def look() -> None:
        try:
            socket.getaddrinfo(host, 443)
            found.append(True)
        except OSError:
            found.append(False)

    t = threading.Thread(target=look, daemon=True)
    t.start()
    t.join(timeout)
    ok = bool(found and found[0])
    _NET[host] = (time.monotonic(), ok)
    return ok


def in_hub_cache(repo: str) -> bool:
    """Whether the local Hugging Face cache holds a snapshot of ``repo`` (its config.json)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id, say: not cached
        return False
    return isinstance(found, str)


def require_available(spec: str, flag: str = "-m") -> str:
    """Refuse, in one line, a spec that names nothing local and cannot be fetched.

    Returns:
        The spec's canonical name (`Spec.key`): what it is loaded under.

    Raises:
        ModelUnavailable: A missing path, a non-GGUF file, or a hub id that is neither
            in the local cache nor fetchable now (offline).
    """
    role = "draft" if flag == "--draft" else "model"
    try:
        s = resolve(spec)
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(f"{role}: {str(exc).removeprefix('model: ')}") from None
    if s.kind != "hub" or in_hub_cache(s.key) or hub_reachable():
        return s.key
    default = " or -m default (the bundled model)" if flag == "-m" else ""
    raise ModelUnavailable(
        f"{role}: {spec!r} is not a local path, not in the Hugging Face cache, and the hub "
        f"cannot be reached; pass a local path ({flag} /path/to/mlx-model-dir or "
        f"file.gguf){default}"
    )
