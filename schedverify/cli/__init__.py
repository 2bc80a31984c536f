"""The command-line front end: ``run(argv, stdout, stderr) -> exit code``.

Each sub-command lives in its own module of this package with ``register(subparsers)`` and
``run(args, out, err) -> int``; this module only dispatches.  ``main`` is the one place that
calls ``sys.exit``.  Exit codes: 0 valid / proved, 1 invalid / refuted / infeasible,
2 usage or input error, 3 unknown, 130 interrupted.

Interrupts: :class:`Interrupts` is the one SIGINT handler of a command, and ``run`` the one
place that answers it: one line, "interrupted", on standard error, and exit code 130, on
every command and whatever was running.  Z3 never sees the signal (its own handler, which
would turn it into an ``unknown`` verdict, is off: :mod:`schedverify.smt.solver`).
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import difflib
import importlib
import re
import signal
import sys
import threading
from typing import TextIO
from collections.abc import Callable, Sequence

from .. import _accel
from ..errors import InternalError, SchedverifyError

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_INTERNAL = 70  # BSD's EX_SOFTWARE: a check of schedverify's own work failed (a bug)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process killed by Ctrl-C

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS = ("check", "generate", "lower", "show", "formula", "prove", "search", "plan", "lint", "importer")


class _UsageExit(Exception):
    def __init__(self, message: str, parser: argparse.ArgumentParser):
        super().__init__(message)
        self.parser = parser


#: What a value looks like, though it starts with "-": a negative number, with or without a
#: unit (``--memory-limit -5GiB``, ``--costs F=-1``), so that it is read as the option's value
#: (and refused by the option, naming it) and not as an unknown option.
_NEGATIVE_VALUE = re.compile(r"^-(?:\d|\.\d)[^\s]*$")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports errors to the caller instead of exiting."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # argparse's own test is -N or -N.N; every version of argparse (3.10 to 3.14) reads it
        # from this attribute, and no option of ours looks like a negative number
        self._negative_number_matcher = _NEGATIVE_VALUE

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


class Interrupts:
    """The one SIGINT handler of a command (a context manager, in the main thread).

    Ctrl-C raises :class:`KeyboardInterrupt`, as Python's own handler does, and that
    interrupt sticks: Python cannot raise it where it lands in a destructor (z3 frees its
    objects in ``__del__``) or a ctypes callback, which would print a traceback and carry on
    as if nothing happened; ctypes turns one raised while it converts an argument into
    ``ArgumentError``; and a library may catch it.  So such a swallowed interrupt is not
    printed (``sys.unraisablehook``), an exception that escapes the command after an
    interrupt is reported as the interrupt (:func:`run`), and until the command has answered it
    (:meth:`answered`) it is raised again in the main thread every :attr:`REPEAT_S`
    seconds.  When SIGINT is ignored (a background job) it stays ignored; outside the main
    thread nothing is installed."""

    REPEAT_S = 0.5

    def __init__(self):
        self.seen = False
        self._answered = threading.Event()
        self._poke = threading.Event()  # raise it again now, not at the next repeat
        self._repeater: threading.Thread | None = None
        self._installed = False
        self._old_handler = None
        self._old_hook: Callable[[sys.UnraisableHookArgs], object] | None = None

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        old = signal.getsignal(signal.SIGINT)
        if old is signal.SIG_IGN:
            return self
        self._old_handler = old
        self._old_hook = sys.unraisablehook
        signal.signal(signal.SIGINT, self._handler)
        sys.unraisablehook = self._unraisable
        self._installed = True
        return self

    def __exit__(self, *exc) -> None:
        self.answered()
        if self._repeater is not None:  # so none lands after the old handler is back
            self._repeater.join()
        if self._installed:
            signal.signal(signal.SIGINT, self._old_handler)
            assert self._old_hook is not None  # saved when the handlers were installed
            sys.unraisablehook = self._old_hook
            self._installed = False

    def answered(self) -> None:
        """The command is answering the interrupt: stop raising it (a further Ctrl-C while
        the one line is printed is ignored)."""
        self._answered.set()
        self._poke.set()

    def _handler(self, signum, frame):
        if self._answered.is_set():
            return
        if not self.seen:
            self.seen = True
            self._repeater = threading.Thread(target=self._repeat, name="schedverify-interrupt",
                                              daemon=True)
            self._repeater.start()
        raise KeyboardInterrupt

    def _repeat(self) -> None:
        while not self._answered.is_set():
            self._poke.wait(self.REPEAT_S)
            self._poke.clear()
            if not self._answered.is_set():
                _thread.interrupt_main(signal.SIGINT)

    def _unraisable(self, info) -> None:
        # a KeyboardInterrupt, or what it broke (ctypes reports one raised while it converts
        # an argument as ArgumentError), while the interrupt is not answered yet
        if isinstance(info.exc_value, KeyboardInterrupt) or (self.seen and not self._answered.is_set()):
            self._poke.set()  # the repeater raises it again, where it can be raised
            return
        (self._old_hook or sys.__unraisablehook__)(info)


def run(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
        stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    with Interrupts() as interrupts:
        try:
            code = _run(argv, out, err)
        except KeyboardInterrupt:
            code = None
        except Exception:
            if not interrupts.seen:
                raise
            code = None  # what the interrupt broke: ctypes turns one into ArgumentError
        finally:
            while interrupts.seen:  # a repeat may land as this starts: then once more
                try:
                    interrupts.answered()
                    break
                except KeyboardInterrupt:
                    pass
        if code is None or interrupts.seen:  # an interrupt a library swallowed counts too
            print("interrupted", file=err)
            return EXIT_INTERRUPTED
        return code


def _run(argv: list[str], out: TextIO, err: TextIO) -> int:
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(out):  # argparse prints --help and --version there
            args, extra = parser.parse_known_args(argv)
        if extra:  # the sub-command's mistake: its usage, and the option meant
            _unrecognized(parser, args, extra)
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
    except InternalError as e:
        print(f"schedverify {args.command}: internal error: {e} (a bug in schedverify: please report it "
              f"with the command line)", file=err)
        return EXIT_INTERNAL
    except SchedverifyError as e:
        print(f"schedverify {args.command}: error: {e}", file=err)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Raise the usage error for arguments nobody took, from the sub-command's parser when
    there is one, with a did-you-mean for each misspelt option."""
    owner = parser
    if args.command is not None:
        for action in parser._subparsers._group_actions if parser._subparsers else ():
            if isinstance(action, argparse._SubParsersAction):
                owner = action.choices[args.command]
    known = [o for a in owner._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for word in extra:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.7)
            if close:
                hints.append(f"did you mean {close[0]}?")
    message = f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else "")
    raise _UsageExit(message, owner)


def main() -> None:
    # A terminal or pipe whose encoding cannot show a character (a schedule's name, a file's
    # path) gets it escaped, not a UnicodeEncodeError halfway through a report.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # the process is the command's: its allocator may keep what it frees (faster big checks)
    _accel.keep_freed_memory()
    code = run()
    if code == EXIT_INTERRUPTED:
        with contextlib.suppress(ValueError):  # answered: a further Ctrl-C does not print a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        # A KeyboardInterrupt that left code run from source text (exec or eval of a string, as
        # sympy's sympify does) sets CPython's unhandled-interrupt flag, answered or not, and
        # `python -m schedverify` then exits by SIGINT instead of 130; running a string clears
        # it (Python/pythonrun.c, run_eval_code_obj)
        exec("")
    sys.exit(code)
