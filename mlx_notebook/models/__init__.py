"""Model specs, GGUF conversion, the bundled default model and the registry."""

from .default import DefaultModelMissing, default_gguf
from .registry import LoadedModel, Registry
from .spec import ModelNotFound, Spec, resolve

__all__ = [
    "DefaultModelMissing",
    "LoadedModel",
    "ModelNotFound",
    "Registry",
    "Spec",
    "default_gguf",
    "resolve",
]
