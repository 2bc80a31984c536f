"""The command-line front end: ``run(argv, stdout, stderr) -> exit code``.

Each sub-command lives in its own module of this package with ``register(subparsers)`` and
``run(args, out, err) -> int``; this module only dispatches.  ``main`` is the one place that
calls ``sys.exit``.  Exit codes: 0 valid / proved, 1 invalid / refuted / infeasible,
2 usage or input error, 3 unknown.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from typing import Sequence, TextIO

from ..errors import SchedverifyError

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS = ("check", "generate", "lower", "show", "formula", "prove", "search")


class _UsageExit(Exception):
    def __init__(self, message: str, parser: argparse.ArgumentParser):
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports errors to the caller instead of exiting."""

    def error(self, message: str):  # noqa: D401
        raise _UsageExit(message, self)

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            raise _UsageExit(message.strip(), self)
        raise _Exit(status)


class _Exit(Exception):
    def __init__(self, status: int):
        self.status = status


def build_parser(out: TextIO | None = None) -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(
        prog="schedverify",
        description="Verify pipeline-parallel training schedules and compute what they cost.",
    )
    from .. import _accel

    parser.add_argument("--version", action="version",
                        version=f"schedverify {__version__} ({_accel.describe()})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f".{name}", __name__).register(sub)
    return parser


def run(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
        stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(out):  # argparse prints --help and --version there
            args = parser.parse_args(argv)
    except _UsageExit as e:
        e.parser.print_usage(err)
        print(f"{e.parser.prog}: error: {e}", file=err)
        return EXIT_USAGE
    except _Exit as e:
        return e.status
    if args.command is None:
        parser.print_help(out)
        return EXIT_USAGE
    try:
        return args.handler(args, out, err)
    except SchedverifyError as e:
        print(f"schedverify {args.command}: error: {e}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130
    except BrokenPipeError:
        return EXIT_OK


def main() -> None:
    # A terminal or pipe whose encoding cannot show a character (a schedule's name, a file's
    # path) gets it escaped, not a UnicodeEncodeError halfway through a report.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    sys.exit(run())
