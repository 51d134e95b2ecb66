"""``%mlx cache [clear [MODEL]]``: the result cache's file, size, entries and hit rate."""

from __future__ import annotations

from IPython.core.error import UsageError


def cache_command(backend, action: str | None, model: str | None) -> str:
    """What ``%mlx cache`` prints (after clearing, for ``clear``).

    Raises:
        UsageError: An unknown action.
    """
    if not hasattr(backend, "result_cache"):
        return "result cache: a server model's results are not cached here"
    cache = backend.result_cache
    if action == "clear":
        n = cache.store.clear(model)
        scope = f" of {model}" if model else ""
        return f"result cache: cleared {_entries(n)}{scope}"
    if action is not None:
        raise UsageError("usage: %mlx cache [clear [MODEL]]")
    st = cache.store.stats()
    looked = st["hits"] + st["misses"]
    rate = f"{st['hits'] / looked:.0%} of {looked} lookups" if looked else "no lookups yet"
    lines = [
        f"result cache ({cache.mode}): {st['path']}",
        f"  {_entries(st['entries'])}, {st['bytes'] / 2**20:.1f} MB; hits this session: {rate}",
    ]
    if st["disabled"]:
        lines.append(f"  off: {st['disabled']}")
    lines += [f"  {name}: {_entries(n)}" for name, n in sorted(st["models"].items())]
    return "\n".join(lines)


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"
