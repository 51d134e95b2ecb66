"""``%%generate --from NAME:I``: branch a bound generation in a cell."""

from __future__ import annotations


def branch_cell(magics, args, cell: str) -> None:
    """``%%generate --from NAME:I``: branch handle NAME at token I; the body is its token.

    ``%generate --from NAME:I`` (no body) draws the token again without the
    original's. The options given
    (``-n``, ``-t``, ``--seed``, ``--logprobs``, ``--inspect``, ``--lookup``...)
    change the branch; the rest is the original's.

    Raises:
        UsageError: A bad ``--from``, a name that is not a handle, a bad position
            or token.
    """
    from IPython.core.error import UsageError

    from .handle import GenerationHandle, remember
    from .options import check_out_name

    name, _, pos = args.branch.rpartition(":")
    if not name or not pos.strip().isdigit():
        raise UsageError(f"--from needs NAME:I, a handle and a token position ({args.branch!r})")
    handle = magics.shell.user_ns.get(name)
    if not isinstance(handle, GenerationHandle):
        raise UsageError(f"--from: {name!r} is not a %%generate handle (bind one with -o {name})")
    if args.out is not None:
        check_out_name(args.out, magics.shell)
    fields = {}
    for opt, field in (("max_tokens", "max_tokens"), ("temperature", "temperature"),
                       ("top_p", "top_p"), ("seed", "seed"),
                       ("repetition_penalty", "repetition_penalty")):  # fmt: skip
        if getattr(args, opt) is not None:
            fields[field] = getattr(args, opt)
    if args.logprobs is not None or args.inspect:
        fields["logprobs"] = args.logprobs if args.logprobs is not None else 5
    if args.lookup or args.suffix:
        fields["draft_kind"] = "lookup" if args.lookup else "suffix"
    token = (cell or "").strip("\n") or None
    i = int(pos)
    try:
        child = handle.branch(i, token, **fields)
    except (IndexError, ValueError) as exc:
        raise UsageError(f"--from {args.branch}: {exc}") from None
    remember(child)
    pieces = handle.pieces()
    if i < len(pieces):  # a record's text names a token whose bytes end later
        text, rec = pieces[i]
        was = repr(rec.text if rec is not None else text)
    else:
        was = "the end"
    what = repr(token) if token is not None else "a fresh draw"
    notice = f"branch of {name} at token {i}: {what} in place of {was}"
    fmt = "inspect" if args.inspect else (args.format or "markdown")
    bind = (args.out, child) if args.out else None
    magics.show(child.job, handle.model, fmt, [notice], bind, args.wait)
