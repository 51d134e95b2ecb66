"""A backend that streams from an OpenAI-compatible server (``mlx_lm.server`` and others)."""
