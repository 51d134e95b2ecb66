"""The local engine: one MLX worker thread that owns every piece of MLX state."""
