"""KV caches: each mlx-lm cache type's protocol, a model's sequence, and prompt reuse."""
