"""What a notebook front end needs before the extension's widgets can show, once a kernel.

Google Colab renders ipywidgets' own controls, but a custom widget (an anywidget: the
chat window) needs Colab's custom widget manager, which a notebook turns on with
``google.colab.output.enable_custom_widget_manager()`` (colabtools#498, anywidget#63;
the same call ipyvolume and ipympl document). It is called here, once, where the
kernel is Colab's. Colab cannot be run on the project's machines: what was and was not
verified is in docs/guide/front-ends.md.
"""

from __future__ import annotations

import sys

_prepared = False


def prepare() -> None:
    """Turn on what this front end needs for custom widgets (a no-op elsewhere)."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    output = _colab_output()
    if output is not None:
        output.enable_custom_widget_manager()


def _colab_output():
    """Colab's ``google.colab.output``, where the kernel is Colab's; else None."""
    if "google.colab" not in sys.modules:  # Colab's kernel imports it at start
        return None
    try:
        from google.colab import output
    except ImportError:
        return None
    return output if hasattr(output, "enable_custom_widget_manager") else None
