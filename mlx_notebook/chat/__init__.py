"""Multi-turn conversations: `Chat` and its turns, independent of IPython."""

from .conversation import REQUEST_FIELDS, Chat, ChatBusy, validate_messages
from .turn import ChatTurn

__all__ = ["REQUEST_FIELDS", "Chat", "ChatBusy", "ChatTurn", "validate_messages"]
