"""``%%generate`` and ``%mlx``: thin magics that build a Request and show a view."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, Int, Unicode, default, observe

from ...engine.backend import Backend, Route, backend_for, existing_backends
from ...engine.request import DEFAULT_MAX_TOKENS, Request
from ...template import TemplateError, cell_body, fill, unknown_notice, visible
from ..views.document import resend_final
from ..views.render import FORMATS, ViewState
from ..views.view import generation_view
from . import formatters, manners
from .handle import GenerationHandle, remember, view_format
from .options import (
    EXAMPLES,
    HELP,
    SUFFIX_CAP,
    check_out_name,
    generation_options,
    in_flags,
    parse,
    schema_option,
    unescape,
    wants_help,
)


@magics_class
class MLXNotebook(Magics):
    """The extension's magics and settings (``%config MLXNotebook.max_tokens = 512``)."""

    default_model = Unicode("default", help="Model spec used when -m is not given.").tag(
        config=True
    )
    max_tokens = Int(DEFAULT_MAX_TOKENS, help="Default maximum number of generated tokens.").tag(
        config=True
    )
    temperature = Float(
        None,
        allow_none=True,
        help="Default sampling temperature (0 = greedy; None: the model's own default "
        "from its generation_config.json, else greedy).",
    ).tag(config=True)
    refresh_hz = Float(20.0, help="Most view refreshes per second.").tag(config=True)
    num_draft_tokens = Int(3, help="Default draft tokens per speculative step.").tag(config=True)
    server_url = Unicode(
        "",
        help="An OpenAI-compatible server (e.g. http://127.0.0.1:8080/v1) for every model "
        "spec that is not a URL itself; empty: generate locally.",
    ).tag(config=True)
    server_api_key = Unicode(
        "", help="Bearer token for server_url; $MLX_NOTEBOOK_API_KEY when empty."
    ).tag(config=True)
    max_batch = Int(
        8,
        help="Most generations decoded together on a local model; 0 or 1 runs them one at a time.",
    ).tag(config=True)
    cache = Unicode(
        "deterministic",
        help="The result cache: 'deterministic' stores and replays greedy and seeded "
        "results, 'all' unseeded sampling too (its first sample), 'off' none.",
    ).tag(config=True)
    prompt_cache_mb = Float(
        0.0,
        help="Byte budget of each local model's prompt caches, in MB; 0: a quarter of the "
        "memory available when the model loads.",
    ).tag(config=True)

    @observe("prompt_cache_mb")
    def _prompt_cache_changed(self, change) -> None:
        engine = self.route("default").backend
        if hasattr(engine, "set_prompt_cache_bytes"):  # a local engine
            mb = change["new"]
            engine.set_prompt_cache_bytes(int(mb * 2**20) if mb > 0 else None)

    @default("cache")
    def _cache_default(self) -> str:
        # What the engine does now ($MLX_NOTEBOOK_RESULT_CACHE), so setting it changes it.
        from ... import config

        return config.get("MLX_NOTEBOOK_RESULT_CACHE")

    @observe("cache")
    def _cache_changed(self, change) -> None:
        engine = self.route("default").backend
        if hasattr(engine, "result_cache"):  # a local engine
            engine.result_cache.set_mode(change["new"])

    @observe("max_batch")
    def _max_batch_changed(self, change) -> None:
        engine = self.route("default").backend
        if hasattr(engine, "max_batch"):  # a local engine
            engine.max_batch = change["new"]

    def __init__(self, shell=None, engine: Backend | None = None, **kw):
        super().__init__(shell=shell, **kw)
        self._engine = engine
        self._notices: list[str] = []

    def route(self, model: str) -> Route:
        """Where requests for ``model`` go (an injected backend wins)."""
        if self._engine is not None and not self._engine.closed:
            return Route(self._engine, model)
        return backend_for(model, self.server_url or None, self.server_api_key or None)

    @property
    def engine(self) -> Backend:
        """The backend for the default model."""
        return self.route(self.default_model).backend

    # -- %%generate ---------------------------------------------------------
    @magic_arguments()
    @generation_options
    @argument("-s", "--system", default=None, help="system prompt")
    @argument("--raw", action="store_true", help="no chat template")
    @argument("--compare", action="store_true", help="normal vs speculative side by side")
    @argument("--repeats", type=int, default=None, help="exactly N pairs for --compare")
    @argument("--budget", type=float, default=60.0, help="most seconds for --compare")
    @argument("--max-pairs", type=int, default=20, help="most pairs for --compare")
    @argument("--metric", default="e2e", help="e2e or decode: what --compare's verdict uses")
    @argument("--over", default=None, help="a list, Series or DataFrame: one row per item")
    @argument("--from", dest="branch", default=None, help="NAME:I: branch handle NAME at token I")
    @line_cell_magic
    def generate(self, line: str, cell: str | None = None):
        """Generate from the cell body; see ``%mlx help``.

        As a line magic (``%generate``) only the forms without a prompt work:
        ``--help`` and ``--from NAME:I`` (IPython refuses an empty cell body).
        """
        if wants_help(line):
            print(HELP)
            return None
        args = parse(self.generate, line)
        if cell is None and args.branch is None:
            raise UsageError("%generate needs a prompt: use %%generate with the prompt below it")
        if args.over is not None:
            from .over import over_cell

            return over_cell(self, args, cell)
        if args.branch is not None:
            from .branch_cell import branch_cell

            return branch_cell(self, args, cell)
        request = self.build_request(args, cell)
        if args.compare:
            from ..measure_views.compare import compare_cell

            return compare_cell(self, args, request)
        return self.run(
            request, out=args.out, wait=args.wait, fmt=args.format, notices=self._notices
        )

    def request_fields(self, args) -> dict:
        """The `Request` fields the shared options describe (settings fill the gaps).

        Raises:
            UsageError: One clear line for a bad combination.
        """
        schema = schema_option(args, self.shell.user_ns if self.shell is not None else {})
        if args.format is None:  # JSON reads as code; a choice or pattern as plain text
            args.format = view_format(schema)
        if args.format not in FORMATS:
            raise UsageError(f"--format must be one of {', '.join(FORMATS)} (got {args.format!r})")
        if getattr(args, "inspect", False):
            args.format = "inspect"  # the view shows the token inspector
        if sum(map(bool, (args.draft, args.lookup, args.suffix))) > 1:
            raise UsageError("use one of --draft MODEL, --lookup or --suffix")
        if args.out is not None:
            check_out_name(args.out, self.shell)
        if args.model is not None and not args.model.strip():
            raise UsageError("-m/--model: must not be empty (omit it for the default model)")
        return dict(
            model=self.default_model if args.model is None else args.model,
            max_tokens=args.max_tokens if args.max_tokens is not None else self.max_tokens,
            temperature=args.temperature if args.temperature is not None else self.temperature,
            top_p=args.top_p,
            seed=args.seed,
            repetition_penalty=args.repetition_penalty,
            stop=[unescape(x) for x in args.stop],
            draft=args.draft,
            draft_kind="lookup" if args.lookup else "suffix" if args.suffix else "none",
            num_draft_tokens=args.num_draft
            if args.num_draft is not None
            else (SUFFIX_CAP if args.suffix else self.num_draft_tokens),
            lookup_ngram=args.ngram,
            think=args.think,
            schema=schema,
            cache=getattr(args, "cache", None),
            logprobs=args.logprobs
            if args.logprobs is not None
            else (5 if getattr(args, "inspect", False) else None),
        )

    def build_request(self, args, cell: str) -> Request:
        """Turn parsed options and the cell body into a validated Request.

        Raises:
            UsageError: One clear line for any bad option or value.
        """
        if getattr(args, "compare", False) and not (args.draft or args.lookup or args.suffix):
            args.lookup = True  # compare against prompt lookup unless a draft is given
        fields = self.request_fields(args)
        prompt, self._notices = self.fill_body(cell)
        if fields["schema"] is not None:  # what of the schema is checked only at the end
            self._notices += list(fields["schema"].notes)
        request = Request(prompt=prompt, system=args.system, chat=not args.raw, **fields)
        try:
            request.validate()
        except ValueError as exc:
            raise UsageError(in_flags(str(exc))) from None
        return request

    def fill_body(self, cell: str) -> tuple[str, list[str]]:
        """The cell body filled from the user's variables, and the view's warnings."""
        text, unknown = self.fill(cell_body(cell))
        return text, [unknown_notice(unknown)] if unknown else []

    def fill(self, text: str) -> tuple[str, list[str]]:
        """Fill ``{name}`` from the user's variables; return the text and unknown names.

        Raises:
            UsageError: A variable's ``str()`` raised (one line naming it).
        """
        shell = self.shell
        ns = visible(shell.user_ns, shell.user_ns_hidden) if shell is not None else {}
        try:
            return fill(text, ns)
        except TemplateError as exc:
            raise UsageError(str(exc)) from None

    def run(
        self,
        request: Request,
        out: str | None = None,
        wait: bool = False,
        fmt: str = "markdown",
        notices: list[str] | None = None,
    ) -> None:
        """Submit, display the view, bind the handle; block with ``wait``.

        Raises:
            UsageError: The request was refused (nothing was queued).
            GenerationError: With ``wait``, the job ended in error (one line).
        """
        route = self.route(request.model)
        request.model = route.model
        try:
            job = route.backend.submit(request)
        except ValueError as exc:
            raise UsageError(in_flags(str(exc))) from None
        handle = GenerationHandle(job, request.model, route.backend)
        remember(handle)
        self.show(job, route.label, fmt, notices, out and (out, handle), wait)

    def show(self, job, label: str, fmt: str, notices, bind=None, wait: bool = False) -> None:
        """Display ``job``'s live view; bind ``(name, value)``; block with ``wait``.

        Raises:
            GenerationError: With ``wait``, the job ended in error (one line).
        """
        r = job.request
        state = ViewState(
            model=label, mode=r.mode, k=r.num_draft_tokens, fmt="text" if fmt == "inspect" else fmt,
            notices=list(notices or []), inspect=fmt == "inspect",
        )  # fmt: skip
        view = generation_view(state, refresh_hz=self.refresh_hz).display()
        view.attach(job)
        if bind:
            self.shell.user_ns[bind[0]] = bind[1]
        if wait:
            try:
                job.result()
            finally:
                # On ■ job.result() cancelled the job and waited: the view shows
                # "stopped" with its text, and the KeyboardInterrupt goes on, so Run
                # All stops as it does for any interrupted cell.
                view.wait_rendered(5.0)  # the final document is sent before the cell ends

    # -- %mlx ---------------------------------------------------------------
    @magic_arguments()
    @argument(
        "command",
        nargs="?",
        default="status",
        help="status | stop | models | unload | panel | cache | help",
    )
    @argument("target", nargs="?", default=None, help="model for unload; clear for cache")
    @argument("extra", nargs="?", default=None, help="model for cache clear")
    @line_magic
    def mlx(self, line: str):
        """Engine status and control; ``%mlx help`` lists the commands."""
        args = parse(self.mlx, line)
        cmd = args.command
        if cmd == "help":
            print(f"{HELP}\n{self.settings_text()}\n\n{EXAMPLES}")
        elif cmd == "stop":
            n = sum(b.cancel_all() for b in existing_backends())
            print(f"cancelled {n} job(s)")
        elif cmd == "status":
            from IPython.display import display

            from ..views.status import status_html

            infos = [b.info() for b in self._backends()]
            text = "\n\n".join(i.format() for i in infos)
            display({"text/html": status_html(infos), "text/plain": text}, raw=True)
        elif cmd == "models":
            lines = [
                f"{m.name}  {m.dtype or ''}  {m.memory_mb if m.memory_mb is not None else ''}"
                for b in self._backends()
                for m in b.info().models
            ]
            print("\n".join(line.rstrip() for line in lines) or "no models loaded")
        elif cmd == "unload":
            route = self.route(args.target or self.default_model)
            spec = route.model if args.target else None
            print(route.backend.unload(spec).message())
        elif cmd == "cache":
            from .cache import cache_command

            print(cache_command(self.route(self.default_model).backend, args.target, args.extra))
        elif cmd == "panel":
            from ..panel.panel import Panel

            return Panel(engine=self._engine, server_url=self.server_url)
        else:
            raise UsageError(f"unknown %mlx command {cmd!r}; try %mlx help")
        return None

    def _backends(self) -> list[Backend]:
        found = existing_backends()
        default = self.engine
        return found if default in found else [default, *found]

    def settings_text(self) -> str:
        """The defaults a cell gets now (``%config MLXNotebook.NAME = ...`` changes them)."""
        from ...engine.defaults import describe, in_force
        from ...engine.request import Request

        route = self.route(self.default_model)
        req = Request("", temperature=self.temperature)
        sampling = describe(in_force(req, route.backend.sampling_defaults(route.model)))
        return (
            "Defaults now (%config MLXNotebook.NAME = VALUE changes them):\n"
            f"  model {self.default_model}  ·  max_tokens {self.max_tokens}\n"
            f"  sampling {sampling}; -t 0 is greedy\n"
            f"  draft tokens per step (-k) {self.num_draft_tokens}  ·  batch rows "
            f"{self.max_batch}  ·  view refreshes {self.refresh_hz:g}/s"
        )

    def status(self) -> str:
        """``%mlx status`` as text: every backend in use (the default one made if needed)."""
        return "\n\n".join(b.info().format() for b in self._backends())


def load(ipython) -> None:
    """Register the magics and their settings."""
    from ..evaluate.cell import EvaluateMagics
    from .chat import ChatMagics

    magics = MLXNotebook(shell=ipython, config=ipython.config)
    ipython.register_magics(magics)
    ipython.register_magics(ChatMagics(ipython, magics))
    ipython.register_magics(EvaluateMagics(ipython, magics))
    if resend_final not in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.register("pre_run_cell", resend_final)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)
    manners.install(ipython)
    formatters.install(ipython)


def unload(ipython) -> None:
    """Unregister the magics and cancel running jobs."""
    mm = ipython.magics_manager
    formatters.uninstall(ipython)
    manners.uninstall(ipython)
    if resend_final in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.unregister("pre_run_cell", resend_final)
    mm.magics["cell"].pop("generate", None)
    mm.magics["line"].pop("mlx", None)
    mm.magics["cell"].pop("chat", None)
    mm.magics["line"].pop("chat", None)
    mm.registry.pop("ChatMagics", None)
    mm.magics["cell"].pop("evaluate", None)
    mm.registry.pop("EvaluateMagics", None)
    for c in [c for c in ipython.configurables if isinstance(c, MLXNotebook)]:
        ipython.configurables.remove(c)
        if c._engine is not None:
            c._engine.cancel_all()
    mm.registry.pop("MLXNotebook", None)
    for b in existing_backends():
        b.cancel_all()
