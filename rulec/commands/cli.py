"""`rulec`: check, compile, format and explain rules; print shell completions.

Exit codes: 0 clean (or warnings only), 1 findings (errors, or warnings with --strict),
2 usage, input/output or internal trouble. No user error prints a traceback; an internal one
prints a one-line message unless RULEC_DEBUG=1.
"""
from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from typing import TYPE_CHECKING, Mapping, Sequence, TextIO

if TYPE_CHECKING:
    from rulec.api import Build
    from rulec.checked import Answer
    from rulec.diagnostics import Diagnostic
    from rulec.source import SourceFile

# Commands that live in other modules: name -> (module with `register(subparsers)`, summary).
# A module is imported only when one of its commands is on the command line (or for the
# completion script, which needs every option); its `register` adds all of its commands.
# `rulec --help` lists the others with the summary here, so it imports none of them.
COMMANDS: dict[str, tuple[str, str]] = {
    "webhook-config": ("rulec.commands.webhook_config",
                       "print the MutatingWebhookConfiguration for a plan"),
    "manifests": ("rulec.commands.manifests",
                  "print the Kubernetes objects that deploy the webhook"),
    "eval": ("rulec.commands.run",
             "evaluate a job and its pods: verdict, events, actions, new state"),
    "mutate": ("rulec.commands.run", "apply the injections to a pod: JSON patch and patched pod"),
    "test": ("rulec.commands.run", "run rule test suites"),
    "why": ("rulec.commands.why",
            "explain a live job as the controller sees it, and whether it agrees"),
    "native": ("rulec.commands.native",
               "which batch Job policies the Job's own podFailurePolicy can take"),
}

FORMATS = ("concise", "full", "json", "github", "sarif")
SHELLS = ("bash", "zsh", "fish")


class _Version(argparse.Action):
    """`--version`: prints the version and exits before any command's module is imported."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from rulec import about

        print(f"rulec {about.version()}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = _parser(args_list)
        args = parser.parse_args(args_list)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except _Usage as err:
        print(err, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # an internal error: one line, unless debugging
        if os.environ.get("RULEC_DEBUG") == "1":
            raise
        print(f"rulec: internal error: {type(err).__name__}: {err} "
              "(set RULEC_DEBUG=1 for a traceback)", file=sys.stderr)
        return 2


def _parser(argv: Sequence[str] = (), *, every: bool = False) -> argparse.ArgumentParser:
    """The parser for the command line `argv`: the commands of other modules are stand-ins
    (name and summary) but the one `argv` names; with `every`, all of them are registered."""
    parser = _Parser(prog="rulec", description="Declarative rules for Kubernetes batch jobs.")
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(metavar="COMMAND", parser_class=_Parser)

    check = sub.add_parser("check", help="report problems in rules",
                           description="Report problems in .rules files.")
    _rules_args(check)
    check.add_argument("--format", choices=FORMATS, default="concise",
                       help="how diagnostics are printed (default: concise)")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    check.set_defaults(func=_check, command="check")

    comp = sub.add_parser("compile", help="compile rules to a plan",
                          description="Compile .rules files to a plan (JSON).")
    _rules_args(comp)
    comp.add_argument("-o", "--output", metavar="FILE",
                      help="write the plan here (default, and `-`: standard output)")
    comp.add_argument("--format", choices=FORMATS, default="concise",
                      help="how diagnostics are printed (default: concise)")
    comp.set_defaults(func=_compile, command="compile")

    fmt = sub.add_parser("fmt", help="format rules canonically",
                         description="Rewrite .rules files in canonical layout, comments kept.")
    fmt.add_argument("paths", nargs="+", metavar="PATH", help=".rules files or folders")
    fmt.add_argument("--check", action="store_true",
                     help="change nothing; exit 1 when a file is not formatted")
    fmt.set_defaults(func=_fmt)

    explain = sub.add_parser("explain", help="explain a diagnostic code",
                             description="Explain a diagnostic code (R123 or its name).")
    explain.add_argument("code", help="a code such as R101, or its name such as unknown-kind")
    explain.set_defaults(func=_explain)

    completion = sub.add_parser(
        "completion", help="print a shell completion script",
        description="Print a completion script for every command and option, e.g. "
                    "`rulec completion bash > ~/.local/share/bash-completion/completions/rulec`.")
    completion.add_argument("shell", choices=SHELLS)
    completion.set_defaults(func=_completion)

    wanted = next((a for a in argv if not a.startswith("-")), None)
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        names = [n for n, (m, _) in COMMANDS.items() if m == module]
        if every or wanted in names:
            try:
                importlib.import_module(module).register(sub)
                continue
            except ImportError:
                pass
        for name in names:
            sub.add_parser(name, help=COMMANDS[name][1], add_help=False)
    return parser


class _CrdFiles(argparse.Action):
    """`--crd FILE...` takes every value up to the next option, so `--crd a.yaml rules/` would
    swallow the rules: a value that is a folder or a `.rules` file is kept as a rules path."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option: str | None = None) -> None:
        given = list(values) if isinstance(values, list) else [str(values)]
        rules = [v for v in given if v.endswith(".rules") or os.path.isdir(v)]
        namespace.crd = [*namespace.crd, *(v for v in given if v not in rules)]
        namespace.rules_after_crd = [*namespace.rules_after_crd, *rules]


def _rules_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help=".rules files or folders")
    p.add_argument("--crd", nargs="+", default=[], action=_CrdFiles, metavar="FILE",
                   help="CRD manifests to check field paths against")
    p.set_defaults(rules_after_crd=[])


def _rule_paths(args: argparse.Namespace) -> list[str]:
    """The rules paths, wherever they stood (see _CrdFiles); at least one."""
    paths = [*args.paths, *args.rules_after_crd]
    if not paths:
        raise _Usage(f"rulec {args.command}: error: the following arguments are required: PATH")
    return paths


class _Usage(Exception):
    """A usage error found after parsing: reported like argparse's own (exit 2)."""


def _check(args: argparse.Namespace) -> int:
    from rulec import checked, files

    try:
        found = [(p, files.read_bytes(p)) for p in files.rule_files(_rule_paths(args))]
    except files.InputError as err:
        print(f"rulec: {err}", file=sys.stderr)
        return 2
    name = checked.key(found, args.crd, (args.format, str(args.strict)))
    answer = checked.load(name) if name is not None else None
    if answer is None:
        try:
            answer = _checked(found, args)
        except files.InputError as err:
            print(f"rulec: {err}", file=sys.stderr)
            return 2
        if name is not None:
            checked.store(name, answer)
    return answer.give()


def _checked(found: list[tuple[str, bytes]], args: argparse.Namespace) -> "Answer":
    """What checking these files prints, and its exit code."""
    from rulec import api, checked, diagnostics, files

    result = api.build_sources([files.source(p, data) for p, data in found], args.crd,
                               emit_plan=False)
    out = io.StringIO()
    _print_diagnostics(result, args.format, out)
    failing = result.errors or (args.strict and result.diagnostics)
    err = ""
    if args.format in ("concise", "full") and result.diagnostics:
        err = f"rulec: {diagnostics.summary(result.diagnostics)}\n"
    return checked.Answer(out.getvalue(), err, 1 if failing else 0)


def _compile(args: argparse.Namespace) -> int:
    from rulec import api, emit

    try:
        result = api.build(_rule_paths(args), args.crd)
    except api.InputError as err:
        print(f"rulec: {err}", file=sys.stderr)
        return 2
    if result.plan is None:
        _print_diagnostics(result, args.format, stream=sys.stderr)
        print(f"rulec: no plan written: {len(result.errors)} error(s)", file=sys.stderr)
        return 1
    _print_diagnostics(result, args.format, stream=sys.stderr)
    text = emit.dumps(result.plan)
    if args.output and args.output != "-":
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:
            print(f"rulec: {args.output}: {err.strerror or err}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


def _fmt(args: argparse.Namespace) -> int:
    from rulec import api, fmt

    try:
        paths = api.rule_files(args.paths)
        sources = [api.read(p) for p in paths]
    except api.InputError as err:
        print(f"rulec: {err}", file=sys.stderr)
        return 2
    status = 0
    for source in sources:
        try:
            result = fmt.format_source(source)
        except api.InputError as err:
            print(f"rulec: {err}", file=sys.stderr)
            status = 2
            continue
        if result.diagnostics:
            from rulec import diagnostics

            sys.stderr.write(diagnostics.render(result.diagnostics, "concise",
                                                {source.path: source}))
            status = max(status, 1)
            continue
        if result.text == source.text:
            continue
        if args.check:
            print(f"rulec: {source.path}: not formatted", file=sys.stderr)
            status = max(status, 1)
            continue
        try:
            with open(source.path, "w", encoding="utf-8") as f:
                f.write(result.text)
        except OSError as err:
            print(f"rulec: {source.path}: {err.strerror or err}", file=sys.stderr)
            return 2
        print(f"rulec: formatted {source.path}", file=sys.stderr)
    return status


def _explain(args: argparse.Namespace) -> int:
    from rulec import diagnostics

    code = diagnostics.lookup(args.code)
    if code is None:
        hint = diagnostics.did_you_mean(
            args.code, [c.name for c in (*diagnostics.CODES, *diagnostics.NATIVE_CODES)])
        print(f"rulec: unknown code `{args.code}`" + (f"; {hint}" if hint else ""),
              file=sys.stderr)
        return 2
    print(f"{code.code} {code.name} ({code.severity}): {code.summary}\n\n{code.doc}")
    return 0


def _completion(args: argparse.Namespace) -> int:
    import shtab

    parser = _parser(every=True)
    for action in _actions(parser):
        if action.metavar in ("PATH", "FILE"):
            action.complete = shtab.FILE  # type: ignore[attr-defined]
    sys.stdout.write(shtab.complete(parser, args.shell))
    return 0


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions of `parser` and of all its subcommands."""
    found: list[argparse.Action] = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _actions(sub)
    return found


def _print_diagnostics(result: Build, fmt: str, stream: TextIO | None = None) -> None:
    if result.diagnostics or fmt in ("json", "sarif"):
        (stream or sys.stdout).write(
            render_diagnostics(result.diagnostics, fmt, result.sources))


def render_diagnostics(found: Sequence[Diagnostic], fmt: str,
                       sources: Mapping[str, SourceFile]) -> str:
    """`found`, in order, in one of FORMATS: the library's text formats, or a SARIF log."""
    from rulec import diagnostics

    if fmt == "sarif":
        from rulec.commands import sarif

        return sarif.render(sorted(found, key=diagnostics.Diagnostic.sort_key))
    return diagnostics.render(found, fmt, sources)


if __name__ == "__main__":
    sys.exit(main())
