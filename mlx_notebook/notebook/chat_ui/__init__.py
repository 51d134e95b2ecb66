"""`ChatUI`: a chat window in a cell over a `Chat`."""

from .widget import ChatUI

__all__ = ["ChatUI"]
