"""``%%generate``, ``%%chat``, ``%mlx`` and their helpers: thin layers that build requests."""
