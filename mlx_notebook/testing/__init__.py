"""Small real models and scripted stand-ins for tests and benchmarks: no downloads.

- `tiny`: random-weight llamas with a real byte-level BPE tokenizer, and their
  quantized copies.
- `scripted`: a model whose next token follows a script, and a virtual clock.
- `families`: tiny random-weight models of many mlx-lm families.
"""

from .scripted import ScriptedModel, VirtualClock, looping_model, script_rule
from .tiny import (
    CHATML,
    CORPUS,
    SPECIALS,
    THINK_SPECIALS,
    THINKING_CHATML,
    build_tiny_model,
    build_tokenizer,
    quantize_model_dir,
    tiny_config,
)

__all__ = [
    "CHATML",
    "CORPUS",
    "SPECIALS",
    "THINKING_CHATML",
    "THINK_SPECIALS",
    "ScriptedModel",
    "VirtualClock",
    "build_tiny_model",
    "build_tokenizer",
    "looping_model",
    "quantize_model_dir",
    "script_rule",
    "tiny_config",
]
