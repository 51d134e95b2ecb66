"""Exceptions shared by the engine's modules."""


class Cancelled(Exception):
    """Raised at a safe point when the job's cancel flag is set."""


class IncompatibleDraft(ValueError):
    """The draft model's vocabulary differs from the main model's."""
