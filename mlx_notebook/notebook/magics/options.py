"""The magics' shared options: parsing, flags in error messages, help text. No widgets.

``%%generate`` and ``%%chat`` take the same generation options; an error about a
`Request` field is reworded with the flag the user typed (``-k/--num-draft``, not
``num_draft_tokens``), and ``-h``/``--help`` print `HELP` whatever else is given.
"""

from __future__ import annotations

import keyword
import re

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument
from IPython.utils.process import arg_split

_ESCAPES = re.compile(r"\\(n|t|\\)")


def parse(magic, line: str):
    """Parse with the magic's `magic_arguments` parser, shell-style (quotes removed).

    Raises:
        UsageError: From the parser, for unknown options or bad values.
    """
    return magic.parser.parse_args(arg_split(line, posix=True, strict=False))


def wants_help(line: str) -> bool:
    """Whether the options ask for help (``-h`` or ``--help``)."""
    return any(t in ("-h", "--help") for t in arg_split(line, posix=True, strict=False))


# The flag a user typed for each `Request` field, so an error names it.
FLAGS = {
    "model": "-m/--model",
    "draft": "--draft",
    "num_draft_tokens": "-k/--num-draft",
    "lookup_ngram": "--ngram",
    "max_tokens": "-n/--max-tokens",
    "temperature": "-t/--temperature",
    "top_p": "--top-p",
    "seed": "--seed",
    "repetition_penalty": "--repetition-penalty",
    "stop": "--stop",
    "system": "-s/--system",
    "prompt": "the cell body",
    "schema": "--schema",
    "choice": "--choice",
    "regex": "--regex",
    "lark": "--schema",
    "logprobs": "--logprobs",
}


def in_flags(message: str) -> str:
    """``num_draft_tokens: must be …`` as ``-k/--num-draft: must be …``."""
    field, sep, rest = message.partition(": ")
    return f"{FLAGS[field]}: {rest}" if sep and field in FLAGS else message


SUFFIX_CAP = 16  # suffix drafts size themselves; -k only caps them

_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit"}


def check_out_name(name: str, shell=None) -> None:
    """Refuse ``-o`` names that are not plain variables or that IPython owns.

    Raises:
        UsageError: Naming the problem.
    """
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"-o/--out needs a Python name (got {name!r})")
    hidden = set(getattr(shell, "user_ns_hidden", ()) or ())
    if name.startswith("_") or name in _IPYTHON_NAMES or name in hidden:
        raise UsageError(
            f"-o/--out: {name!r} is reserved by IPython (names starting with '_', In, Out, "
            "exit, quit, get_ipython); pick another name"
        )


_OPTIONS = [
    argument("-m", "--model", default=None, help="model spec"),
    argument("--draft", default=None, help="draft model spec"),
    argument("--lookup", action="store_true", help="prompt-lookup drafting"),
    argument("--suffix", action="store_true", help="suffix drafting from this and earlier jobs"),
    argument("-k", "--num-draft", type=int, default=None, help="draft tokens per step"),
    argument("--ngram", type=int, default=3, help="n-gram size for --lookup"),
    argument("-n", "--max-tokens", type=int, default=None, help="max generated tokens"),
    argument("-t", "--temperature", type=float, default=None, help="sampling temperature"),
    argument("--top-p", type=float, default=None, help="nucleus sampling"),
    argument("--seed", type=int, default=None, help="random seed"),
    argument("--repetition-penalty", type=float, default=None, help="repetition penalty (1: none)"),
    argument("--stop", action="append", default=[], help="stop string (repeatable)"),
    argument("-o", "--out", default=None, help="name to bind the result handle to"),
    argument("--wait", action="store_true", help="block until done"),
    argument("-f", "--format", default=None, help="markdown, text, code or json"),
    argument("--schema", default=None, help="variable holding a schema: the output's shape"),
    argument("--choice", default=None, help="comma-separated options: the output is one"),
    argument("--regex", default=None, help="the output matches this regular expression"),
    argument("--logprobs", type=int, default=None, help="record K alternatives per token"),
    argument("--inspect", action="store_true", help="tint each token by its probability"),
    argument(
        "--no-strict",
        dest="strict",
        action="store_false",
        default=True,
        help="accept schema keys that cannot be enforced (the value is validated at the end)",
    ),  # fmt: skip
    argument("--think", action="store_true", default=None, help="reasoning models: think first"),
    argument("--no-think", dest="think", action="store_false", help="reasoning models: answer"),
    argument(
        "--cache",
        dest="cache",
        action="store_const",
        const="all",
        default=None,
        help="store and replay this cell's result, even unseeded sampling",
    ),
    argument(
        "--no-cache",
        dest="cache",
        action="store_const",
        const="off",
        help="neither replay nor store this cell's result",
    ),
    argument(
        "--refresh",
        dest="cache",
        action="store_const",
        const="refresh",
        help="generate anew and store the result (a replay no more)",
    ),
]


def generation_options(fn):
    """The options ``%%generate`` and ``%%chat`` share (a `magic_arguments` decorator)."""
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return fn


EXAMPLES = """Examples:
  %%generate -n 64                          the default model, 64 tokens at most
  Write a haiku about the sea.

  %%generate --lookup --compare             is prompt lookup faster here? (runs until clear)
  Repeat this paragraph exactly: ...

  %%generate --over df -o res               one row per DataFrame row, batched;
  Summarize: {text}                         res.to_frame() waits, then joins onto df

  %%chat -s "Be brief."                     a conversation; %chat show prints it
  What is the capital of France?"""


def schema_option(args, user_ns: dict):
    """The `Schema` that ``--schema``/``--choice``/``--regex`` describe, or None.

    Raises:
        UsageError: More than one given, an unknown variable, or a bad schema
            (one line naming the flag).
    """
    given = [f for f in ("schema", "choice", "regex") if getattr(args, f, None) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise UsageError("use one of --schema NAME, --choice a,b,c or --regex PATTERN")
    from ...schema import Schema, SchemaError

    try:
        if args.choice is not None:
            return Schema.choice([o.strip() for o in args.choice.split(",")])
        if args.regex is not None:
            return Schema.regex(args.regex)
        if args.schema not in user_ns:
            raise UsageError(f"--schema: no variable named {args.schema!r}")
        return Schema.of(user_ns[args.schema], strict=getattr(args, "strict", True))
    except SchemaError as exc:
        raise UsageError(in_flags(str(exc))) from None


def unescape(s: str) -> str:
    r"""Turn ``\n``, ``\t`` and ``\\`` typed in a stop string into the characters."""
    return _ESCAPES.sub(lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], s)


HELP = """mlx_notebook magics

%%generate [options]        the cell body is the prompt; {name} is filled from your variables
  -m/--model SPEC           default | /path/to/mlx-dir | /path/file.gguf | hub/id
  --draft SPEC | --lookup | --suffix
                            speculative decoding: a draft model, prompt lookup, or suffix
                            drafting from this job and earlier ones (adaptive length)
  -k/--num-draft N          draft tokens per step (1-16; for --suffix the cap, default 16)
  -n/--max-tokens N  -t/--temperature T  --top-p P  --seed S
  --repetition-penalty R    1 turns the bundled model's mild guard (1.1) off
  -s/--system TEXT          system prompt        --raw   no chat template
  --stop STR                stop string (repeatable)
  -o/--out NAME             bind the result: reading it (.text, .stats, .to_frame()) waits
                            for the end; .partial_text and .snapshot() do not (.cancel())
  --wait                    block until done (interrupt the kernel to stop)
  -f/--format markdown|text|code|json   (default: markdown; json with --schema)
  --schema NAME             structured output: NAME holds a JSON Schema dict, a pydantic
                            class, a type (int, list[str], Literal[...], a TypedDict...);
                            enforced token by token; .value is the parsed value
  --no-strict               accept schema keys a grammar cannot enforce (uniqueItems,
                            not, ...): validated at the end (.valid, .problem)
  --choice a,b,c | --regex PATTERN
                            the output is exactly one of the options / matches PATTERN
  --logprobs K              record each token's probability, rank, entropy, source and K
                            alternatives (0-20): .tokens (.to_frame()), .perplexity
  --inspect                 show the text tinted by each token's probability, with its
                            alternatives on hover (implies --logprobs 5)
  --from NAME:I              branch handle NAME at its token I: the cell body is the new
                            token there (%generate --from NAME:I with no body: draw it
                            again); -o b then b.side_by_side() shows both
  --cache | --no-cache | --refresh
                            greedy and seeded results are stored and replayed (the view
                            says "replayed"); --refresh generates anew, --no-cache skips
                            the cache, --cache stores even unseeded sampling
  --think | --no-think      a reasoning model's thinking switch (default: its template's);
                            the reasoning shows folded above the answer, and in .reasoning
  --compare                 normal vs speculative decoding in interleaved pairs, run until
                            the answer is clear: faster, slower, or within 5 %
  --budget S --max-pairs N  when --compare gives up undecided (default 60 s, 20 pairs)
  --repeats N               exactly N pairs instead
  --metric e2e|decode       what --compare's verdict uses (default: end to end)
  --over NAME               one generation per item of a list/Series ({item}) or DataFrame
                            row ({column}), batched, in one view; -o binds the MapResult

%%chat [-c NAME] [-s SYSTEM] [options]   the cell is the next message of a conversation
%chat list | history [NAME] | reset [NAME] | undo [NAME] | save NAME FILE | load NAME FILE
      | show [NAME] | ui [NAME]     (ui: the conversation in a chat window)
%%evaluate --over DATA [-m A,B] [--score exact:COL|includes:COL|choice|judge:M|FN] [-e N]
                            models x prompt variants (under '--- name' lines), scored,
                            with intervals and paired verdicts; -o binds the run
%mlx status | stop | models | unload [MODEL] | panel | cache [clear [MODEL]] | help

From Python (import mlx_notebook as mn):
  mn.generate(prompt, **fields)     block for a Result (any option above as a field)
  mn.stream(prompt, **fields)       a live handle at once; shown in a cell, the live view
  mn.evaluate(df, template, models=[...], score=...)   what %%evaluate does, blocking
  mn.map(rows, "template {col}")    many prompts, batched; .to_frame()
  mn.score(text, prompt=None)       each token's log-probability, shown as the inspector
  mn.compare(prompt, lookup=True)   speculative vs normal decoding; mn.sweep(prompt) over k
  mn.Chat(system=...)  mn.ChatUI()  mn.Panel()  mn.last()  mn.Schema.of(...)

Models on a server: -m http://HOST:PORT/v1[#MODEL], or for every cell
  %config MLXNotebook.server_url = "http://HOST:PORT/v1"  (key: MLX_NOTEBOOK_API_KEY)
"""
