"""The ``kernel`` command line: a lazy registry of commands, one module each.

Registering a command is one line in ``COMMANDS``: its name, the module that
implements it, and the one-line help ``kernel --help`` shows. The module
either defines ``register(app: typer.Typer)`` (adding one command named like
the entry) or ``app`` (a ``typer.Typer`` group, e.g. ``verify``, ``check``).
A module is imported only when its command runs (or its own ``--help`` is
asked for), so ``kernel --version`` and ``kernel --help`` import neither the
command modules nor rich nor Dask (start-up: BENCHMARKS.md, adr/0013).

Exit codes shared by every command (README "Exit codes", adr/0013):

- 0: the input was intact and the requested policy holds;
- 1: the command ran and its verdict is negative (``--fail-on``, BLOCKED, ...);
- 2: usage error or input refused at the boundary, as one line
  ``error: <code>: <message>`` on stderr, never a traceback;
- 3: integrity: the input is not what was recorded (identity mismatch);
- 4: the environment stopped it: a full disk, an I/O error, a read-only
  filesystem, a missing sandbox tool; one line, no partial output;
- 130 / 143: interrupted by SIGINT / SIGTERM (an unfinished output file is removed);
- 141: stdout was closed by its reader (``| head``): the output is incomplete.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    import typer

    app: typer.Typer  # built on first access by the module __getattr__ below

__all__ = ["COMMANDS", "main"]  # and ``app``, built on first access (module __getattr__)

#: name -> (module, one-line help). Add a command here (the module holds the rest).
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "attest": ("kernel.commands.attest",
               "Sign a stored run's outcomes: an in-toto Statement in a DSSE envelope (Ed25519)."),
    "attest-keygen": ("kernel.commands.attest", "Write a new Ed25519 key pair for kernel attest."),
    "audit": ("kernel.commands.audit",
              "Recompute every id of a stored run offline; verify its attestation."),
    "bundle": ("kernel.commands.bundle", "Seal a search draft into a replay bundle."),
    "check": ("kernel.commands.check",
              "Pinned external producer/checker runs and checker-only replay (seed 003)."),
    "digest": ("kernel.commands.digest",
               "Recompute and print the identity of every record in a chain or bundle."),
    "replay": ("kernel.commands.replay",
               "Classify every attempt of a bundle, in run order (ADR-0229)."),
    "run": ("kernel.commands.run",
            "Run the main job: replay every attempt and certify targets with z3 -> cvc5."),
    "schema": ("kernel.commands.schema",
               "Print or write the JSON Schemas (draft 2020-12) of the kernel's documents."),
    "verify": ("kernel.commands.verify",
               "Plan, seal and gate deterministic verification (seed 000)."),
}

_HELP: Final = (
    "replay-kernel: fail-closed candidate replay and verification.\n\n"
    "Exit codes: 0 intact and the policy holds; 1 negative verdict (--fail-on, BLOCKED); "
    "2 usage error or input refused at the boundary; 3 integrity (the input is not what "
    "was recorded); 4 the environment stopped it (disk full, I/O error, read-only "
    "filesystem, no sandbox tools): retry elsewhere; 130/143 interrupted (SIGINT/SIGTERM); "
    "141 stdout closed early "
    "(| head): output incomplete. Errors are one line 'error: <code>: <message>' on "
    "stderr.\n\n"
    "Paths: - is stdin (input) or stdout (--out). Each command's --help gives its input, "
    "output, exit codes and an example, e.g. kernel replay --help.\n\n"
    "Shell completion: kernel --show-completion SHELL prints the script, kernel "
    "--install-completion SHELL installs it (SHELL: bash, zsh, fish, powershell, pwsh)."
)
#: The shells typer writes completion scripts for.
_SHELLS: Final = ("bash", "zsh", "fish", "powershell", "pwsh")
#: The variable that asks the command for completions (typer's name for "kernel").
_COMPLETE_VAR: Final = "_KERNEL_COMPLETE"
_VERSION_FLAGS: Final = (["--version"], ["-V"])


def _version() -> str:
    from kernel import __version__

    return f"kernel {__version__}"


def _completion_shell(value: str) -> str:
    """The shell named; refuses (exit 2) any other."""
    if value not in _SHELLS:
        from kernel.commands._io import refuse

        refuse("unknown_shell", f"{value!r} is not one of {', '.join(_SHELLS)}")
    return value


def _build_app() -> typer.Typer:
    import importlib

    import typer

    # typer (>= 0.26) vendors click as typer._click: its exceptions are the
    # ones raised, so they are the ones caught here.
    from typer import _click as click
    from typer import _completion_classes as completion_classes
    from typer import _completion_shared as completion_shared
    from typer._click import exceptions as click_errors
    from typer.core import TyperArgument, TyperGroup, TyperOption

    def _usage_code(exc: click_errors.UsageError) -> str:
        # click's usage errors are an open hierarchy, so this is a lookup with
        # a default, not an exhaustive dispatch (most specific class first).
        codes: tuple[tuple[type[click_errors.UsageError], str], ...] = (
            (click_errors.NoSuchOption, "unknown_option"),
            (click_errors.MissingParameter, "missing_parameter"),
            (click_errors.BadParameter, "invalid_value"),
            (click_errors.BadOptionUsage, "bad_option_usage"),
        )
        return next((code for kind, code in codes if isinstance(exc, kind)), "usage_error")

    readable_types: Final = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT",
                             "path": "PATH", "bool": "BOOLEAN"}

    def _readable(label: str) -> str:
        # typer 0.28's "<str>", "<path>", "<a|b>" as click always wrote them (no
        # option of the kernel takes several values, so no "..." form arises).
        inner = label.removeprefix("<").removesuffix(">")
        if "|" in inner:
            return f"[{inner}]"
        return readable_types.get(inner.lower(), inner.upper())

    class ReadableOption(TyperOption):
        """``--job PATH``, ``--run-id TEXT``, ``--layout [auto|document|stream]``."""

        def make_metavar(self, ctx: click.Context) -> str:
            if self.metavar is not None:
                return self.metavar
            return _readable(super().make_metavar(ctx))

    class ReadableArgument(TyperArgument):
        """``NAME``, ``[NAME]``, ``NAME...`` in usage lines and help rows (typer
        0.28 writes ``{NAME}``, ``{PATH...}`` and ``NAME:PATH``)."""

        def make_metavar(self, ctx: click.Context, *, usage: bool = False) -> str:
            name = self.metavar if self.metavar is not None else (self.name or "").upper()
            if self.nargs != 1 and not name.endswith("..."):
                name += "..."
            return name if self.required or not usage else f"[{name}]"

    def _short_help_everywhere(command: click.Command) -> None:
        command.context_settings.setdefault("help_option_names", ["-h", "--help"])
        for param in command.params:
            # The same objects, shown readably: only their display methods differ.
            if type(param) is TyperArgument:
                param.__class__ = ReadableArgument
            elif type(param) is TyperOption:
                param.__class__ = ReadableOption
        for sub in getattr(command, "commands", {}).values():
            _short_help_everywhere(sub)

    def _interrupted_before_start(exc: KeyboardInterrupt) -> NoReturn:
        """Ctrl-C or SIGTERM while the command line is parsed or a command is imported.

        Typer would turn it into a silent exit 130; nothing was done yet.
        """
        from kernel.commands import _signals

        name, code = _signals.interruption(exc)
        click.echo(f"error: interrupted: {name}; nothing was done", err=True)
        raise typer.Exit(code) from None

    def _load_command(cmd_name: str) -> click.Command:
        module = importlib.import_module(COMMANDS[cmd_name][0])
        group = getattr(module, "app", None)
        if isinstance(group, typer.Typer):
            command = typer.main.get_command(group)
        else:
            holder = typer.Typer(rich_markup_mode=None)
            module.register(holder)
            command = typer.main.get_group(holder).commands[cmd_name]
        _short_help_everywhere(command)
        return command

    class LazyGroup(TyperGroup):
        """Commands from ``COMMANDS``, imported on first use; errors in one line."""

        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(COMMANDS)

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            if cmd_name not in COMMANDS:
                return None
            try:
                return _load_command(cmd_name)
            except KeyboardInterrupt as exc:
                _interrupted_before_start(exc)

        def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
            try:
                return super().make_context(*args, **kwargs)
            except KeyboardInterrupt as exc:
                _interrupted_before_start(exc)

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            # The table's own help: listing commands must not import them.
            rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

        def invoke(self, ctx: click.Context) -> Any:
            # Reached only when a command runs (never for --help or --version).
            from kernel.commands import _signals

            _signals.terminate_as_interrupt()
            try:
                return super().invoke(ctx)
            except KeyboardInterrupt as exc:
                # Commands that can say more (replay, run) catch it themselves;
                # the ``with`` blocks unwound on the way here removed any
                # unfinished --out file.
                name, code = _signals.interruption(exc)
                click.echo(f"error: interrupted: {name}; the output is incomplete and no "
                           "output file was written", err=True)
                raise typer.Exit(code) from None
            except BrokenPipeError:
                _signals.silence_stdout()
                click.echo("error: broken_pipe: stdout was closed by its reader; the output "
                           "is incomplete", err=True)
                raise typer.Exit(_signals.EXIT_SIGPIPE) from None
            except OSError as exc:
                # A write the machine could not complete, wherever it was (a work
                # directory's record, a store): exit 4, one line, never a traceback.
                from kernel.commands._io import ENVIRONMENT_EXIT, environment_code

                cause = environment_code(exc)
                if cause is None:
                    raise
                where = f"{exc.filename}: " if exc.filename else ""
                click.echo(f"error: {cause}: {where}{exc.strerror or exc}; the command could "
                           "not complete", err=True)
                raise typer.Exit(ENVIRONMENT_EXIT) from None

        def main(self, *args: Any, **kwargs: Any) -> Any:
            standalone = kwargs.pop("standalone_mode", True)
            kwargs["standalone_mode"] = False  # errors are printed here, in one line
            try:
                value = super().main(*args, **kwargs)
                code = value if isinstance(value, int) else 0
            except click_errors.NoArgsIsHelpError as exc:
                # ``kernel`` (or ``kernel check``) alone: the usage help as
                # help is printed, on stderr as click does, exit 2; not one
                # flattened ``error: usage_error:`` line.
                click.echo(exc.ctx.get_help(), err=True)
                code = 2
            except click_errors.UsageError as exc:
                message = " ".join(exc.format_message().split())
                click.echo(f"error: {_usage_code(exc)}: {message}", err=True)
                code = 2
            except typer.Abort:  # end of input at a prompt
                click.echo("error: aborted: end of input", err=True)
                code = 130
            except click_errors.ClickException as exc:
                click.echo(f"error: {type(exc).__name__.lower()}: {exc.format_message()}",
                           err=True)
                code = exc.exit_code
            except KeyboardInterrupt as exc:
                from kernel.commands import _signals

                name, code = _signals.interruption(exc)
                click.echo(f"error: interrupted: {name}", err=True)
            if standalone:
                sys.exit(code)
            return code

    app = typer.Typer(
        name="kernel",
        help=_HELP,
        cls=LazyGroup,
        no_args_is_help=True,
        # typer's own completion options take no shell once shellingham is
        # installed: "--show-completion zsh" printed bash's script, and with no
        # shell among the parent processes, "Shell  not supported.". The
        # root's options below take the shell and refuse an unknown one.
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    def _print_version(value: bool) -> None:
        if value:
            typer.echo(_version())
            raise typer.Exit()

    # typer's shell classes, which answer _KERNEL_COMPLETE=complete_bash (the
    # variable its scripts set); add_completion=True would have registered them.
    completion_classes.completion_init()

    def _show_completion(value: str | None) -> None:
        if value is not None:
            typer.echo(_completion_script(value))
            raise typer.Exit()

    def _install_completion(value: str | None) -> None:
        if value is not None:
            shell = _completion_shell(value)
            try:
                _, path = completion_shared.install(
                    shell=shell, prog_name="kernel", complete_var=_COMPLETE_VAR)
            except OSError as exc:
                from kernel.commands._io import refuse

                refuse("completion_not_installed", f"{shell}: {exc}")
            typer.echo(f"{shell} completion installed in {path}; it takes effect in a new shell")
            raise typer.Exit()

    def _completion_script(value: str) -> str:
        return completion_shared.get_completion_script(
            prog_name="kernel", complete_var=_COMPLETE_VAR, shell=_completion_shell(value))

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", "-V", callback=_print_version, is_eager=True,
            help="Print the version and exit.",
        ),
        show_completion: str | None = typer.Option(
            None, "--show-completion", metavar="SHELL",
            callback=_show_completion, is_eager=True, expose_value=False,
            help="Print the completion script for SHELL (bash, zsh, fish, powershell, "
                 "pwsh) and exit.",
        ),
        install_completion: str | None = typer.Option(
            None, "--install-completion", metavar="SHELL",
            callback=_install_completion, is_eager=True, expose_value=False,
            help="Install the completion script for SHELL in its start-up file (bash: "
                 "~/.bashrc sources ~/.bash_completions/kernel.sh) and exit.",
        ),
    ) -> None:
        """replay-kernel: fail-closed candidate replay and verification."""

    return app


def __getattr__(name: str) -> object:
    # ``kernel.cli.app`` (the typer app, for tests and embedding) is built on
    # first use so that importing this module stays cheap.
    if name == "app":
        app = _build_app()
        globals()["app"] = app
        return app
    raise AttributeError(name)


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:] in _VERSION_FLAGS:  # answered before typer, click or rich is imported
        print(_version())  # a signal the launcher held is dropped at this exit: all is done
        return
    from kernel.commands import _signals

    _signals.terminate_as_interrupt()  # from the start: SIGTERM unwinds like Ctrl-C
    try:
        # The `kernel` launcher (bin/kernel) held SIGINT/SIGTERM pending through
        # the interpreter's start-up; one sent meanwhile is raised here, under
        # the handler below. Nothing started later inherits the block.
        _signals.accept_held_signals()
        import typer

        app = __getattr__("app")
        assert isinstance(app, typer.Typer)
        command = typer.main.get_command(app)
    except KeyboardInterrupt as exc:
        # Ctrl-C (or SIGTERM) while the command line is still being imported
        # (the first few hundred ms): nothing was read or written yet; no traceback.
        name, code = _signals.interruption(exc)
        print(f"error: interrupted: {name}; nothing was done", file=sys.stderr)
        sys.exit(code)
    try:
        command.main(prog_name="kernel")
    finally:
        _signals.ignore_from_now()


if __name__ == "__main__":
    main()
