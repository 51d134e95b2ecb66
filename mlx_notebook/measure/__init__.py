"""Measurement on any backend: Compare and Sweep with repeated, interleaved runs.

No IPython or widgets: the notebook views render these same objects.
"""

from .compare import CompareResult, Comparison, compare
from .sweep import Sweep, SweepResult, sweep

__all__ = ["CompareResult", "Comparison", "Sweep", "SweepResult", "compare", "sweep"]
