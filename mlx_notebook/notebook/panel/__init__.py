"""The control panel: settings, Generate / Stop / Compare / Sweep, and its history."""

from .panel import Panel

__all__ = ["Panel"]
